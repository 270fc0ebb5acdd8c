//! Kubernetes resource quantities, just enough for node sizing (GPU and CPU
//! counts used by the ML plugins): the value of
//! a quantity rounded up to an integer (`resource.Quantity.Value()`), exact
//! (no floating point), and lookups in a `resources` JSON object.

use serde_json::Value;

/// The quantity `s` rounded up to an integer (`"2.5"` → 3, `"500m"` → 1,
/// `"1Ki"` → 1024, `"1e3"` → 1000). Values beyond `i64` saturate.
pub fn ceil(s: &str) -> Result<i64, String> {
    let t = s.trim();
    let (negative, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(num_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(format!("invalid quantity {s:?}"));
    }
    let mut mantissa: u128 = 0;
    for d in int_part.chars().chain(frac_part.chars()) {
        let digit = u128::from(
            d.to_digit(10)
                .ok_or_else(|| format!("invalid quantity {s:?}"))?,
        );
        mantissa = mantissa.saturating_mul(10).saturating_add(digit);
    }
    let frac_digits =
        i32::try_from(frac_part.len()).map_err(|_| format!("invalid quantity {s:?}"))?;
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        other => match other.strip_prefix(['e', 'E']) {
            Some(e) => (
                e.parse::<i32>()
                    .map_err(|_| format!("invalid quantity {s:?}"))?,
                0,
            ),
            None => return Err(format!("invalid quantity {s:?}")),
        },
    };
    let exp10 = exp10.saturating_sub(frac_digits);
    let scaled = mantissa.saturating_mul(1u128 << exp2.min(100));
    let magnitude: u128 = if exp10 >= 0 {
        scaled.saturating_mul(10u128.saturating_pow(exp10.unsigned_abs().min(38)))
    } else {
        let div = 10u128.saturating_pow(exp10.unsigned_abs().min(38));
        // Round the magnitude towards +infinity for positive values and
        // towards zero (its ceiling) for negative ones.
        if negative {
            scaled / div
        } else {
            scaled.div_ceil(div)
        }
    };
    let magnitude = i64::try_from(magnitude).unwrap_or(i64::MAX);
    Ok(if negative { -magnitude } else { magnitude })
}

/// A quantity in JSON: a string, or (as written in YAML) a number.
pub fn ceil_json(v: &Value) -> Result<i64, String> {
    match v {
        Value::String(s) => ceil(s),
        Value::Number(n) => ceil(&n.to_string()),
        other => Err(format!("invalid quantity {other}")),
    }
}

/// `(name, value)` of a resources map (`requests` or `limits`) in key order.
fn entries<'a>(resources: &'a Value, map: &str) -> impl Iterator<Item = (&'a String, &'a Value)> {
    resources
        .get(map)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
}

/// GPUs per node (`GetNumGPUPerNode`): the first resource whose lower-cased
/// name contains `gpu`, in `requests`, else in `limits`; rounded up; 0 if none.
/// `field` names the resources in errors.
pub fn gpu_per_node(resources: Option<&Value>, field: &str) -> Result<i64, String> {
    let Some(res) = resources else { return Ok(0) };
    for map in ["requests", "limits"] {
        if let Some((name, q)) =
            entries(res, map).find(|(name, _)| name.to_lowercase().contains("gpu"))
        {
            return ceil_json(q).map_err(|e| format!("{field}.{map}[{name}]: {e}"));
        }
    }
    Ok(0)
}

/// CPUs per node: `ceil(requests.cpu)` if non-zero, else `ceil(limits.cpu)`,
/// else 0.
pub fn cpu_per_node(resources: Option<&Value>, field: &str) -> Result<i64, String> {
    let Some(res) = resources else { return Ok(0) };
    for map in ["requests", "limits"] {
        if let Some(q) = res.get(map).and_then(|m| m.get("cpu")) {
            let n = ceil_json(q).map_err(|e| format!("{field}.{map}[cpu]: {e}"))?;
            if n != 0 {
                return Ok(n);
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rounds_up_exactly() {
        for (q, want) in [
            ("2.5", 3),
            ("0.7", 1),
            ("4", 4),
            ("500m", 1),
            ("1500m", 2),
            ("2000m", 2),
            ("1k", 1000),
            ("1Ki", 1024),
            ("1.5Gi", 1_610_612_736),
            ("1e3", 1000),
            ("1E-3", 1),
            ("0", 0),
            (".5", 1),
            ("100n", 1),
        ] {
            assert_eq!(ceil(q), Ok(want), "{q}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for q in ["", "abc", "1x", "m", "1.2.3"] {
            assert!(ceil(q).is_err(), "{q}");
        }
    }

    #[test]
    fn gpu_prefers_requests_then_limits_and_any_gpu_name() {
        let r = json!({"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": 8}});
        assert_eq!(gpu_per_node(Some(&r), "f"), Ok(8));
        let r = json!({"requests": {"amd.com/GPU": "2"}, "limits": {"nvidia.com/gpu": "8"}});
        assert_eq!(gpu_per_node(Some(&r), "f"), Ok(2));
        assert_eq!(gpu_per_node(Some(&json!({})), "f"), Ok(0));
        assert_eq!(gpu_per_node(None, "f"), Ok(0));
    }

    #[test]
    fn cpu_prefers_non_zero_requests() {
        assert_eq!(
            cpu_per_node(
                Some(&json!({"requests": {"cpu": "2.5"}, "limits": {"cpu": "8"}})),
                "f"
            ),
            Ok(3)
        );
        assert_eq!(
            cpu_per_node(
                Some(&json!({"requests": {"cpu": "0"}, "limits": {"cpu": "8"}})),
                "f"
            ),
            Ok(8)
        );
        assert_eq!(
            cpu_per_node(Some(&json!({"limits": {"cpu": "700m"}})), "f"),
            Ok(1)
        );
        assert_eq!(
            cpu_per_node(Some(&json!({"requests": {"memory": "1Gi"}})), "f"),
            Ok(0)
        );
        let err = cpu_per_node(
            Some(&json!({"requests": {"cpu": "lots"}})),
            "spec.trainer.resourcesPerNode",
        );
        assert_eq!(
            err,
            Err("spec.trainer.resourcesPerNode.requests[cpu]: invalid quantity \"lots\"".into())
        );
    }
}
