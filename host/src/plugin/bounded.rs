//! Bounds on everything a plugin's words reach: error messages, log lines,
//! warnings and the counts and sizes of what a call returns.
//!
//! Text from a plugin is untrusted: it is cut to a fixed size and every
//! control character (newlines, carriage returns, escape sequences, Unicode
//! line and paragraph separators, bidirectional overrides) is written as an
//! escape, so it can neither flood a log nor forge a log line, an Event or a
//! condition message.

/// Bytes kept of one message a plugin wrote (an error, a warning, a field
/// error's detail, captured stderr in a trap message).
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// Bytes kept of one `host.log` line.
pub const MAX_LOG_LINE_BYTES: usize = 4096;

/// Objects one `build` call may return.
pub const MAX_OBJECTS_PER_CALL: usize = 64;

/// Bytes of one emitted object (JSON); the API server stores at most ~1.5 MB.
pub const MAX_OBJECT_BYTES: usize = 1 << 20;

/// Admission warnings one `validate` call may return.
pub const MAX_WARNINGS: usize = 64;

/// Field errors one `validate` call may return.
pub const MAX_FIELD_ERRORS: usize = 128;

/// `host.get-object` calls one guest call may make.
pub const MAX_READS_PER_CALL: usize = 256;

/// Whether `c` must be escaped in text shown to people.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with control characters escaped (`\n`, `\r`, `\t`, `\u{..}`) and
/// cut to at most `max` bytes (plus a note saying how much was cut).
pub fn sanitize(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 32);
    let mut consumed = 0;
    for c in text.chars() {
        let escaped = match c {
            '\n' => Some("\\n".to_owned()),
            '\r' => Some("\\r".to_owned()),
            '\t' => Some("\\t".to_owned()),
            c if needs_escape(c) => Some(format!("\\u{{{:x}}}", c as u32)),
            _ => None,
        };
        let len = escaped.as_ref().map_or(c.len_utf8(), String::len);
        if out.len() + len > max {
            break;
        }
        match escaped {
            Some(e) => out.push_str(&e),
            None => out.push(c),
        }
        consumed += c.len_utf8();
    }
    if consumed < text.len() {
        out.push_str(&format!(" …[{} more bytes]", text.len() - consumed));
    }
    out
}

/// [`sanitize`] with [`MAX_MESSAGE_BYTES`].
pub fn message(text: &str) -> String {
    sanitize(text, MAX_MESSAGE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_cuts() {
        assert_eq!(sanitize("a\nb\r\tc", 100), "a\\nb\\r\\tc");
        assert_eq!(sanitize("\u{1b}[31mred", 100), "\\u{1b}[31mred");
        assert_eq!(
            sanitize("x\u{2028}y\u{202e}z", 100),
            "x\\u{2028}y\\u{202e}z"
        );
        let long = "é".repeat(1000);
        let s = sanitize(&long, 10);
        assert!(s.starts_with("ééééé "), "{s}");
        assert!(s.ends_with("[1990 more bytes]"), "{s}");
        assert!(!message(&"x".repeat(10 << 20)).contains('\n'));
        assert!(message(&"x".repeat(10 << 20)).len() < MAX_MESSAGE_BYTES + 64);
    }
}
