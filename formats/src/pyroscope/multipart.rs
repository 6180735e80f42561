//! `multipart/form-data` bodies (RFC 7578 over RFC 2046), as pyroscope-go
//! sends its profiles: a small, bounded, synchronous splitter over a body
//! already in memory. Each part's body is a slice of the request (no
//! copy); at most [`MAX_PARTS`] parts with [`MAX_HEADER_BYTES`] of headers
//! each, every part named by its `Content-Disposition`.

use memchr::memmem;

/// Most parts one body may have (pyroscope-go sends one or two).
pub const MAX_PARTS: usize = 8;
/// Most bytes of one part's headers.
pub const MAX_HEADER_BYTES: usize = 8 << 10;
/// Longest boundary RFC 2046 allows.
const MAX_BOUNDARY: usize = 70;

/// One part of a multipart body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part<'a> {
    /// Its form field's name (`Content-Disposition: form-data; name=…`).
    pub name: String,
    /// Its file name, when it has one.
    pub filename: Option<String>,
    /// Its bytes, within the body.
    pub body: &'a [u8],
}

/// Why a multipart body could not be split. Parts are numbered from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MultipartError {
    /// The `Content-Type` has no usable boundary.
    #[error("Content-Type {0:?} has no boundary parameter of 1 to 70 characters")]
    NoBoundary(String),
    /// The body does not start with the boundary.
    #[error("the body does not start with the boundary --{0}")]
    NoFirstBoundary(String),
    /// More parts than [`MAX_PARTS`].
    #[error("more than {MAX_PARTS} parts")]
    TooManyParts,
    /// A part's headers do not end (no blank line within the limit).
    #[error(
        "part {part}: its headers do not end with a blank line within {MAX_HEADER_BYTES} bytes"
    )]
    Headers {
        /// The part.
        part: usize,
    },
    /// A part without a name.
    #[error("part {part} has no Content-Disposition name (form-data; name=\"…\")")]
    NoName {
        /// The part.
        part: usize,
    },
    /// A part that is not followed by a boundary.
    #[error("part {part} is not closed by the boundary (the body ends without --{boundary}--)")]
    Unclosed {
        /// The part.
        part: usize,
        /// The boundary.
        boundary: String,
    },
    /// Something other than a line end after a boundary.
    #[error("part {part}: the boundary line has text after the boundary")]
    BoundaryLine {
        /// The part.
        part: usize,
    },
}

/// The boundary of a `multipart/…` `Content-Type`, quoted or not.
pub fn boundary(content_type: &str) -> Result<String, MultipartError> {
    let none = || MultipartError::NoBoundary(content_type.chars().take(200).collect());
    let value = parameters(content_type)
        .find(|(k, _)| k.eq_ignore_ascii_case("boundary"))
        .map(|(_, v)| v)
        .ok_or_else(none)?;
    if value.is_empty() || value.len() > MAX_BOUNDARY || value.contains(['\r', '\n']) {
        return Err(none());
    }
    Ok(value)
}

/// Splits `body` (of a request whose `Content-Type` is `content_type`)
/// into its parts. The preamble before the first boundary and the epilogue
/// after the last are ignored, as RFC 2046 says.
pub fn parts<'a>(content_type: &str, body: &'a [u8]) -> Result<Vec<Part<'a>>, MultipartError> {
    let boundary = boundary(content_type)?;
    let delimiter = format!("\r\n--{boundary}");
    let finder = memmem::Finder::new(delimiter.as_bytes());
    // The first boundary may open the body, without the line end before
    // it that every later one has.
    let mut at = if body.starts_with(&delimiter.as_bytes()[2..]) {
        delimiter.len() - 2
    } else {
        finder
            .find(body)
            .map(|i| i + delimiter.len())
            .ok_or_else(|| MultipartError::NoFirstBoundary(boundary.clone()))?
    };
    let mut parts = Vec::new();
    loop {
        let part = parts.len() + 1;
        let rest = &body[at..];
        if rest.starts_with(b"--") {
            return Ok(parts);
        }
        // Transport padding, then the line end.
        let padding = rest
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t'))
            .count();
        let rest = &rest[padding..];
        if !rest.starts_with(b"\r\n") {
            return Err(if rest.is_empty() {
                MultipartError::Unclosed {
                    part: part - 1,
                    boundary,
                }
            } else {
                MultipartError::BoundaryLine { part }
            });
        }
        if parts.len() == MAX_PARTS {
            return Err(MultipartError::TooManyParts);
        }
        let start = at + padding + 2;
        let window = &body[start..body.len().min(start + MAX_HEADER_BYTES + 4)];
        // A part without headers starts with its blank line.
        let (headers, body_start) = if window.starts_with(b"\r\n") {
            ("", start + 2)
        } else {
            let end = memmem::find(window, b"\r\n\r\n")
                .filter(|&e| e <= MAX_HEADER_BYTES)
                .ok_or(MultipartError::Headers { part })?;
            (
                std::str::from_utf8(&window[..end])
                    .map_err(|_| MultipartError::Headers { part })?,
                start + end + 4,
            )
        };
        let (name, filename) = disposition(headers).ok_or(MultipartError::NoName { part })?;
        let len = finder
            .find(&body[body_start..])
            .ok_or_else(|| MultipartError::Unclosed {
                part,
                boundary: boundary.clone(),
            })?;
        parts.push(Part {
            name,
            filename,
            body: &body[body_start..body_start + len],
        });
        at = body_start + len + delimiter.len();
    }
}

/// The `name` and `filename` of a part's `Content-Disposition: form-data`
/// header.
fn disposition(headers: &str) -> Option<(String, Option<String>)> {
    let value = headers.split("\r\n").find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-disposition")
            .then_some(value)
    })?;
    let mut name = None;
    let mut filename = None;
    for (k, v) in parameters(value) {
        if k.eq_ignore_ascii_case("name") {
            name = Some(v);
        } else if k.eq_ignore_ascii_case("filename") {
            filename = Some(v);
        }
    }
    Some((name.filter(|n| !n.is_empty())?, filename))
}

/// The `key=value` parameters after a header value's first `;`, values
/// unquoted (`\"` inside quotes stands for `"`).
fn parameters(value: &str) -> impl Iterator<Item = (String, String)> + '_ {
    let mut rest = value.split_once(';').map_or("", |(_, r)| r);
    std::iter::from_fn(move || {
        loop {
            let trimmed = rest.trim_start_matches([' ', '\t', ';']);
            if trimmed.is_empty() {
                return None;
            }
            let (key, after) = match trimmed.find(['=', ';']) {
                Some(i) if trimmed.as_bytes()[i] == b'=' => (&trimmed[..i], &trimmed[i + 1..]),
                Some(i) => {
                    rest = &trimmed[i..];
                    continue;
                }
                None => {
                    rest = "";
                    return None;
                }
            };
            let after = after.trim_start();
            let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
                let mut value = String::new();
                let mut chars = quoted.char_indices();
                let mut end = quoted.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            if let Some((_, escaped)) = chars.next() {
                                value.push(escaped);
                            }
                        }
                        '"' => {
                            end = i + 1;
                            break;
                        }
                        c => value.push(c),
                    }
                }
                (value, &quoted[end..])
            } else {
                let end = after.find(';').unwrap_or(after.len());
                (after[..end].trim_end().to_owned(), &after[end..])
            };
            rest = next;
            return Some((key.trim().to_owned(), value));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GO: &str = "multipart/form-data; boundary=b0undary";

    fn body(parts: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        for (name, bytes) in parts {
            b.extend_from_slice(
                format!(
                    "--b0undary\r\nContent-Disposition: form-data; name=\"{name}\"; \
                     filename=\"{name}.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            );
            b.extend_from_slice(bytes);
            b.extend_from_slice(b"\r\n");
        }
        b.extend_from_slice(b"--b0undary--\r\n");
        b
    }

    #[test]
    fn parts_as_go_writes_them() {
        let b = body(&[
            ("profile", b"\x1f\x8b\r\n--b0und"),
            ("sample_type_config", b"{}"),
        ]);
        let parts = parts(GO, &b).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].name, "profile");
        assert_eq!(parts[0].filename.as_deref(), Some("profile.bin"));
        assert_eq!(parts[0].body, b"\x1f\x8b\r\n--b0und");
        assert_eq!(parts[1].body, b"{}");
    }

    #[test]
    fn quoted_boundaries_and_preambles() {
        let b = [&b"preamble\r\n"[..], &body(&[("profile", b"x")])].concat();
        let quoted = "multipart/form-data; charset=utf-8; boundary=\"b0undary\"";
        assert_eq!(parts(quoted, &b).unwrap()[0].body, b"x");
        assert_eq!(
            boundary("multipart/form-data;boundary=\"a\\\"b\"").unwrap(),
            "a\"b"
        );
    }

    #[test]
    fn bad_bodies_name_the_part() {
        let err = |ct: &str, b: &[u8]| parts(ct, b).unwrap_err().to_string();
        assert!(err("multipart/form-data", b"").contains("no boundary"));
        assert!(
            err(
                &format!("multipart/form-data; boundary={}", "x".repeat(71)),
                b""
            )
            .contains("no boundary")
        );
        assert!(err(GO, b"nothing").contains("does not start with the boundary"));
        let no_name = b"--b0undary\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b0undary--";
        assert_eq!(
            err(GO, no_name),
            "part 1 has no Content-Disposition name (form-data; name=\"…\")"
        );
        let unclosed = b"--b0undary\r\nContent-Disposition: form-data; name=a\r\n\r\nxyz";
        assert!(err(GO, unclosed).starts_with("part 1 is not closed"));
        let nine: Vec<(&str, &[u8])> = vec![("p", b"x"); 9];
        assert_eq!(err(GO, &body(&nine)), "more than 8 parts");
        let eight: Vec<(&str, &[u8])> = vec![("p", b"x"); 8];
        assert_eq!(parts(GO, &body(&eight)).unwrap().len(), 8);
        let long = format!(
            "--b0undary\r\nX: {}\r\n\r\nx\r\n--b0undary--",
            "y".repeat(MAX_HEADER_BYTES)
        );
        assert!(err(GO, long.as_bytes()).contains("headers do not end"));
    }
}
