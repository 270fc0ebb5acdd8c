//! Field errors as Kubernetes prints them, so a denial reads exactly like one
//! from a Go admission webhook.
//!
//! - [`render_field_error`]: one error, `<field>: <Type>[: <value>][: <detail>]`.
//!   `Required value`, `Forbidden`, `Too long` and `Internal error` never
//!   show the value; the others show it when one is given: strings quoted as
//!   Go's `%q` does, numbers and booleans bare, anything else as JSON.
//! - [`aggregate`]: the list as one message: duplicates dropped (first
//!   occurrence kept), one error alone, several as `[e1, e2]`.

use serde_json::Value;
use trainforge_api::plugin::{FieldError, FieldErrorType};

/// The type's name as Kubernetes prints it.
pub fn type_name(t: FieldErrorType) -> &'static str {
    match t {
        FieldErrorType::NotFound => "Not found",
        FieldErrorType::Required => "Required value",
        FieldErrorType::Duplicate => "Duplicate value",
        FieldErrorType::Invalid => "Invalid value",
        FieldErrorType::NotSupported => "Unsupported value",
        FieldErrorType::Forbidden => "Forbidden",
        FieldErrorType::TooLong => "Too long",
        FieldErrorType::TooMany => "Too many",
        FieldErrorType::Internal => "Internal error",
        FieldErrorType::TypeInvalid => "Invalid type",
    }
}

/// `s` quoted as Go's `strconv.Quote` does: `\"`, `\\`, the C escapes
/// (`\a \b \f \n \r \t \v`), other control characters as `\xNN` (below
/// 0x80) or `\uNNNN`, printable Unicode kept.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control()
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}') =>
            {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A bad value (JSON text, or plain text when it is not JSON) as Go prints
/// it in a field error.
fn render_value(raw: &str) -> String {
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::String(s)) => go_quote(&s),
        Ok(Value::Number(n)) => n.to_string(),
        Ok(Value::Bool(b)) => b.to_string(),
        Ok(Value::Null) => go_quote("null"),
        Ok(other) => other.to_string(),
        Err(_) => go_quote(raw),
    }
}

/// One field error exactly as Kubernetes' `field.Error.Error()` prints it.
pub fn render_field_error(e: &FieldError) -> String {
    let mut s = format!("{}: {}", e.field, type_name(e.error_type));
    let shows_value = !matches!(
        e.error_type,
        FieldErrorType::Required
            | FieldErrorType::Forbidden
            | FieldErrorType::TooLong
            | FieldErrorType::Internal
    );
    if shows_value && let Some(v) = &e.bad_value {
        s.push_str(": ");
        s.push_str(&render_value(v));
    }
    if !e.detail.is_empty() {
        s.push_str(": ");
        s.push_str(&e.detail);
    }
    s
}

/// The messages as one, as Kubernetes' `ErrorList.ToAggregate().Error()`
/// prints them: duplicates dropped, a single message alone, several as
/// `[m1, m2]`. Empty for none.
pub fn aggregate<I: IntoIterator<Item = String>>(messages: I) -> String {
    let mut seen: Vec<String> = Vec::new();
    for m in messages {
        if !seen.contains(&m) {
            seen.push(m);
        }
    }
    match seen.len() {
        0 => String::new(),
        1 => seen.remove(0),
        _ => format!("[{}]", seen.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fe(t: FieldErrorType, value: Option<&str>, detail: &str) -> FieldError {
        FieldError {
            error_type: t,
            field: "spec.x".into(),
            bad_value: value.map(str::to_owned),
            detail: detail.into(),
        }
    }

    #[test]
    fn every_type_prints_like_kubernetes() {
        use FieldErrorType::*;
        let cases = [
            (
                Invalid,
                Some(r#""PET_NODE_RANK""#),
                "d",
                r#"spec.x: Invalid value: "PET_NODE_RANK": d"#,
            ),
            (
                Invalid,
                Some("2"),
                "always must be 1",
                "spec.x: Invalid value: 2: always must be 1",
            ),
            (Invalid, None, "d", "spec.x: Invalid value: d"),
            (Invalid, Some("true"), "", "spec.x: Invalid value: true"),
            (
                Invalid,
                Some("null"),
                "d",
                r#"spec.x: Invalid value: "null": d"#,
            ),
            (Invalid, Some("1.5"), "d", "spec.x: Invalid value: 1.5: d"),
            (
                Invalid,
                Some(r#"["a",1]"#),
                "d",
                r#"spec.x: Invalid value: ["a",1]: d"#,
            ),
            (
                Invalid,
                Some("not json"),
                "d",
                r#"spec.x: Invalid value: "not json": d"#,
            ),
            (Required, Some(r#""""#), "d", "spec.x: Required value: d"),
            (Required, None, "", "spec.x: Required value"),
            (Forbidden, Some(r#""v""#), "d", "spec.x: Forbidden: d"),
            (NotFound, Some(r#""n""#), "", r#"spec.x: Not found: "n""#),
            (
                Duplicate,
                Some(r#""n""#),
                "",
                r#"spec.x: Duplicate value: "n""#,
            ),
            (
                NotSupported,
                Some(r#""z""#),
                r#"supported values: "a", "b""#,
                r#"spec.x: Unsupported value: "z": supported values: "a", "b""#,
            ),
            (
                TooLong,
                Some(r#""xxxx""#),
                "may not be more than 3 bytes",
                "spec.x: Too long: may not be more than 3 bytes",
            ),
            (
                TooMany,
                Some("5"),
                "must have at most 3 items",
                "spec.x: Too many: 5: must have at most 3 items",
            ),
            (Internal, Some("1"), "boom", "spec.x: Internal error: boom"),
            (
                TypeInvalid,
                Some(r#""s""#),
                "expected int",
                r#"spec.x: Invalid type: "s": expected int"#,
            ),
        ];
        for (t, v, d, want) in cases {
            assert_eq!(render_field_error(&fe(t, v, d)), want, "{t:?}");
        }
    }

    #[test]
    fn strings_are_quoted_like_go() {
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("l1\nl2\t\u{1}\u{7f}"), r#""l1\nl2\t\x01\x7f""#);
        assert_eq!(go_quote("é\u{202e}"), "\"é\\u202e\"");
    }

    #[test]
    fn aggregates_dedupe_and_bracket() {
        assert_eq!(aggregate(Vec::new()), "");
        assert_eq!(aggregate(["a".to_owned()]), "a");
        assert_eq!(aggregate(["a".to_owned(), "a".to_owned()]), "a");
        assert_eq!(
            aggregate(["a".to_owned(), "b".to_owned(), "a".to_owned()]),
            "[a, b]"
        );
    }
}
