//! Normalizes a rendered object so that applying it again unchanged is a no-op: nulls
//! (which a server-side apply reads as "remove") are dropped at every depth, and whole
//! numbers written as floats (`2.0`) become integers, as the API server stores them.

use serde_json::{Number, Value};

/// Normalizes `v` in place.
pub fn normalize(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(normalize);
        }
        Value::Array(a) => {
            a.retain(|x| !x.is_null());
            a.iter_mut().for_each(normalize);
        }
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64())
                && f.fract() == 0.0
                && f.abs() < 9.0e15
            {
                *n = Number::from(f as i64);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nulls_are_dropped_and_whole_floats_become_integers() {
        let mut v = json!({"a": null, "b": [1, null, 2.0], "c": {"d": null, "e": 1.5}, "f": {}});
        normalize(&mut v);
        assert_eq!(v, json!({"b": [1, 2], "c": {"e": 1.5}, "f": {}}));
    }
}
