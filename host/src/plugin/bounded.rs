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

/// Bytes of every object the plugins of one pass emit for a TrainJob
/// together (JSON), unless one of its plugins was granted a larger output
/// bound: then that. Each call's output is bounded on its own; without this
/// a TrainJob served by many plugins could emit all their bounds.
pub const MAX_TRAINJOB_OBJECT_BYTES: usize = 8 << 20;

/// Admission warnings one `validate` call may return.
pub const MAX_WARNINGS: usize = 64;

/// Field errors one `validate` call may return.
pub const MAX_FIELD_ERRORS: usize = 128;

/// `host.get-object` calls one guest call may make.
pub const MAX_READS_PER_CALL: usize = 256;

/// Bytes of the TrainJob status one `status` call may return (JSON). A
/// TrainJob's status is a few conditions and one entry per replicated job.
pub const MAX_STATUS_BYTES: usize = 64 << 10;

/// Conditions in the status one `status` call may return.
pub const MAX_STATUS_CONDITIONS: usize = 32;

/// Bytes of one condition message in a returned status (the API's own
/// bound on a condition message).
pub const MAX_CONDITION_MESSAGE_BYTES: usize = 32 << 10;

/// Why a status a plugin returned (`text`, parsed as `status`) is out of
/// bounds, if it is: at most [`MAX_STATUS_BYTES`], at most
/// [`MAX_STATUS_CONDITIONS`] conditions, each message at most
/// [`MAX_CONDITION_MESSAGE_BYTES`].
pub fn status_refusal(text: &str, status: &serde_json::Value) -> Option<String> {
    let conditions = status
        .get("conditions")
        .and_then(serde_json::Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if conditions.len() > MAX_STATUS_CONDITIONS {
        return Some(format!(
            "status has {} conditions, more than {MAX_STATUS_CONDITIONS}",
            conditions.len()
        ));
    }
    let long = conditions.iter().find_map(|c| {
        let message = c.get("message").and_then(serde_json::Value::as_str)?;
        (message.len() > MAX_CONDITION_MESSAGE_BYTES).then(|| {
            format!(
                "the message of condition {} is {} bytes, more than {MAX_CONDITION_MESSAGE_BYTES}",
                sanitize(
                    c.get("type")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("?"),
                    64
                ),
                message.len()
            )
        })
    });
    long.or_else(|| {
        (text.len() > MAX_STATUS_BYTES).then(|| {
            format!(
                "status is {} bytes, more than {MAX_STATUS_BYTES}",
                text.len()
            )
        })
    })
}

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

/// The size of `v` as JSON, counted without building the text.
pub fn json_len(v: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Writing a `Value` into a sink that cannot fail does not fail.
    let _ = serde_json::to_writer(&mut c, v);
    c.0
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

    #[test]
    fn a_status_is_bounded_in_size_conditions_and_messages() {
        use serde_json::json;
        let check = |v: serde_json::Value| status_refusal(&v.to_string(), &v);
        let cond = |t: &str, m: &str| json!({"type": t, "status": "True", "message": m});
        assert_eq!(
            check(json!({"conditions": [cond("Complete", "done")]})),
            None
        );
        let many: Vec<_> = (0..=MAX_STATUS_CONDITIONS)
            .map(|i| cond(&format!("C{i}"), ""))
            .collect();
        let e = check(json!({ "conditions": many })).unwrap();
        assert!(e.contains("33 conditions"), "{e}");
        let long = "x".repeat(MAX_CONDITION_MESSAGE_BYTES + 1);
        let e = check(json!({"conditions": [cond("Complete", &long)]})).unwrap();
        assert!(e.contains("condition Complete"), "{e}");
        let e = check(json!({"jobsStatus": [{"name": "x".repeat(MAX_STATUS_BYTES)}]})).unwrap();
        assert!(e.contains("bytes, more than"), "{e}");
    }
}
