//! Frame colours: by kind of code or by binary, dimmed when a search does
//! not match, red/blue by growth in the diff view.

use std::hash::{DefaultHasher, Hash, Hasher};

use kiln_model::FrameKind;

/// An sRGB colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rgb(pub u8, pub u8, pub u8);

impl Rgb {
    /// CSS text of the colour (`#rrggbb`).
    pub fn css(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }

    /// This colour mixed towards `other` by `t` (0 to 1).
    pub fn mix(self, other: Rgb, t: f64) -> Rgb {
        let t = t.clamp(0.0, 1.0);
        let m = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * t).round() as u8;
        Rgb(m(self.0, other.0), m(self.1, other.1), m(self.2, other.2))
    }
}

/// Base hue (degrees) of a kind family: warm for native code, orange-red
/// for the kernel, green for interpreted and JIT-compiled code (the JIT
/// frames named from perf maps too), purple for GPU work. Go
/// frames its producer named are compiled code: a hue of their own next
/// to native's, so a Go service's own code stands out from its libraries.
pub fn kind_hue(kind: FrameKind) -> f64 {
    match kind {
        FrameKind::Native => 35.0,
        FrameKind::Go => 50.0,
        FrameKind::Kernel => 8.0,
        FrameKind::Python
        | FrameKind::Jvm
        | FrameKind::V8
        | FrameKind::Ruby
        | FrameKind::Php
        | FrameKind::Dotnet
        | FrameKind::Perl
        | FrameKind::Beam
        | FrameKind::Jit => 110.0,
        FrameKind::GpuKernel
        | FrameKind::GpuInstruction
        | FrameKind::GpuStall
        | FrameKind::GpuMemory => 275.0,
        FrameKind::Idle | FrameKind::Truncated => 210.0,
        FrameKind::Label => 190.0,
    }
}

/// A name's stable jitter in 0..1, so neighbours differ but a function
/// keeps its colour across views.
fn jitter(text: &str) -> f64 {
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    (h.finish() % 1000) as f64 / 1000.0
}

/// Colour of a frame by kind (hue by family, shade by name).
pub fn by_kind(kind: FrameKind, name: &str) -> Rgb {
    let j = jitter(name);
    if kind == FrameKind::Label {
        // The root and label groups: quiet, so that code stands out.
        return hsl(kind_hue(kind), 0.12, 0.52 + 0.08 * j);
    }
    hsl(
        kind_hue(kind) + j * 18.0 - 9.0,
        0.62 + 0.2 * j,
        0.55 + 0.1 * j,
    )
}

/// Colour of a frame by binary (hue by binary name); frames of no known
/// binary are grey.
pub fn by_binary(module: &str, name: &str) -> Rgb {
    if module.is_empty() {
        return hsl(0.0, 0.0, 0.55 + 0.1 * jitter(name));
    }
    hsl(jitter(module) * 360.0, 0.55, 0.58 + 0.08 * jitter(name))
}

/// The highlight of a search match.
pub const MATCH: Rgb = Rgb(0xe0, 0x3c, 0xc8);

/// Colour of a node that grew (`delta` > 0) or shrank, in percentage
/// points of all samples: full colour from 5 points on.
pub fn diff(delta: f64) -> Rgb {
    let neutral = Rgb(0xc8, 0xc4, 0xbe);
    let t = (delta.abs() / 5.0).clamp(0.0, 1.0).sqrt();
    if delta >= 0.0 {
        neutral.mix(Rgb(0xe0, 0x31, 0x31), t)
    } else {
        neutral.mix(Rgb(0x2f, 0x6f, 0xe0), t)
    }
}

/// Colour of a node whose change is within sampling noise (the server's
/// comparison did not flag its function): [`diff`]'s, mostly faded to
/// the neutral, so that the flagged stand out.
pub fn diff_muted(delta: f64) -> Rgb {
    diff(delta).mix(Rgb(0xc8, 0xc4, 0xbe), 0.8)
}

/// The colour of a diff's node: [`diff`], or [`diff_muted`] when the
/// comparison is in and did not flag it.
pub fn diff_node(delta: f64, significant: Option<bool>) -> Rgb {
    match significant {
        Some(false) => diff_muted(delta),
        _ => diff(delta),
    }
}

/// HSL (hue in degrees, saturation and lightness 0 to 1) to RGB.
pub fn hsl(h: f64, s: f64, l: f64) -> Rgb {
    let h = h.rem_euclid(360.0) / 60.0;
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let x = c * (1.0 - (h % 2.0 - 1.0).abs());
    let (r, g, b) = match h as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let byte = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    Rgb(byte(r), byte(g), byte(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hsl_hits_the_primaries() {
        assert_eq!(hsl(0.0, 1.0, 0.5), Rgb(255, 0, 0));
        assert_eq!(hsl(120.0, 1.0, 0.5), Rgb(0, 255, 0));
        assert_eq!(hsl(240.0, 1.0, 0.5), Rgb(0, 0, 255));
        assert_eq!(Rgb(255, 0, 16).css(), "#ff0010");
    }

    #[test]
    fn growth_is_red_and_shrink_is_blue() {
        let grew = diff(10.0);
        let shrank = diff(-10.0);
        assert!(grew.0 > grew.2);
        assert!(shrank.2 > shrank.0);
        assert_eq!(diff(0.0), Rgb(0xc8, 0xc4, 0xbe));
    }

    #[test]
    fn kinds_get_distinct_families() {
        let kernel = by_kind(FrameKind::Kernel, "f");
        let python = by_kind(FrameKind::Python, "f");
        assert_ne!(kernel, python);
        assert_eq!(
            by_kind(FrameKind::Native, "f"),
            by_kind(FrameKind::Native, "f")
        );
    }
}
