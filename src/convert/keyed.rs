//! A list of objects that is a map by one of their fields (`keyed`): `[{name: a, port:
//! 80}]` is `{a: {port: 80}}`. A list not in its keys' order gives its order back, to be
//! kept aside, so the round trip keeps it.

use serde_json::{Map, Value, json};

/// The map of `list` by each item's `key`, and the keys' order when it is not sorted.
pub fn to_map(list: Value, key: &str) -> Result<(Value, Option<Value>), String> {
    let Value::Array(items) = list else {
        return Err("is not a list".into());
    };
    let mut map = Map::new();
    let mut order = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let Value::Object(mut o) = item else {
            return Err(format!("item {i} is not an object"));
        };
        let Some(Value::String(k)) = o.remove(key) else {
            return Err(format!("item {i} has no `{key}` (a string)"));
        };
        if map.insert(k.clone(), Value::Object(o)).is_some() {
            return Err(format!("`{key}: {k}` is there twice"));
        }
        order.push(k);
    }
    let sorted = order.windows(2).all(|w| w[0] < w[1]);
    Ok((Value::Object(map), (!sorted).then(|| json!(order))))
}

/// The list of `map`'s values, each with its key as `key`, in the keys' order.
pub fn to_list(map: Value, key: &str) -> Result<Value, String> {
    let Value::Object(m) = map else {
        return Err("is not a map".into());
    };
    let mut out = Vec::with_capacity(m.len());
    for (k, v) in m {
        let mut o = match v {
            Value::Object(o) => o,
            Value::Null => Map::new(),
            _ => return Err(format!("`{k}` is not an object")),
        };
        o.insert(key.to_string(), Value::String(k));
        out.push(Value::Object(o));
    }
    Ok(Value::Array(out))
}

/// `list` in the keys' `order` (keys not in it last, as they were).
pub fn reorder(list: &mut Value, key: &str, order: &[Value]) {
    let Some(items) = list.as_array_mut() else {
        return;
    };
    let rank = |v: &Value| {
        order
            .iter()
            .position(|o| Some(o) == v.get(key))
            .unwrap_or(order.len())
    };
    items.sort_by_key(rank);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_and_its_map_are_the_same_entries() {
        let list = json!([{"name": "b", "port": 2}, {"name": "a"}]);
        let (map, order) = to_map(list.clone(), "name").unwrap();
        assert_eq!(map, json!({"a": {}, "b": {"port": 2}}));
        assert_eq!(order, Some(json!(["b", "a"])));
        let mut back = to_list(map, "name").unwrap();
        reorder(&mut back, "name", order.unwrap().as_array().unwrap());
        assert_eq!(back, list);
        assert!(to_map(json!([{"name": "a"}, {"name": "a"}]), "name").is_err());
        assert!(to_map(json!([{"port": 1}]), "name").is_err());
    }
}
