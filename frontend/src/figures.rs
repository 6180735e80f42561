//! Figures as people read them.

/// Cores with precision that fits the size: `2.4`, `0.35`, `0.0028`,
/// `2.8e-5` (a profile of one process over a day is often far below a
/// thousandth of a core).
pub fn cores(cores: f64) -> String {
    let magnitude = cores.abs();
    if magnitude == 0.0 {
        "0".to_owned()
    } else if magnitude >= 10.0 {
        format!("{cores:.1}")
    } else if magnitude >= 0.1 {
        format!("{cores:.2}")
    } else if magnitude >= 0.001 {
        format!("{cores:.4}")
    } else {
        format!("{cores:.1e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_follows_the_size() {
        assert_eq!(cores(12.345), "12.3");
        assert_eq!(cores(0.345), "0.34");
        assert_eq!(cores(0.00278), "0.0028");
        assert_eq!(cores(0.0000278), "2.8e-5");
        assert_eq!(cores(0.0), "0");
    }
}
