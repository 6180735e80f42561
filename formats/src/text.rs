//! What the text formats share: UTF-8 checking and numbered lines.

use crate::error::ImportError;

/// The input as text, or an error naming the first byte that is not UTF-8
/// and its line.
pub(crate) fn as_text(input: &[u8]) -> Result<&str, ImportError> {
    std::str::from_utf8(input).map_err(|e| {
        let byte = e.valid_up_to();
        let line = 1 + input[..byte].iter().filter(|&&b| b == b'\n').count();
        ImportError::NotUtf8 { byte, line }
    })
}

/// The lines of `text` with their numbers (from 1), without the line
/// ending (`\n` or `\r\n`).
pub(crate) fn numbered_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().map(|(i, line)| (i + 1, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_utf8_names_byte_and_line() {
        let err = as_text(b"a 1\nb\xff 2\n").unwrap_err();
        assert!(matches!(err, ImportError::NotUtf8 { byte: 5, line: 2 }));
        assert_eq!(
            err.to_string(),
            "input is not valid UTF-8 at byte 5 (line 2)"
        );
    }

    #[test]
    fn lines_are_numbered_from_one_without_carriage_returns() {
        let lines: Vec<_> = numbered_lines("a\r\n\nb").collect();
        assert_eq!(lines, [(1, "a"), (2, ""), (3, "b")]);
    }
}
