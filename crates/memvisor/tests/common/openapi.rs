//! Checking an API against its published OpenAPI file: answers against the documented
//! statuses and schemas, and the API's Rust types against the schemas, field for field.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// The published schema `docs/NAME`.
pub fn load(name: &str) -> Value {
    let path = format!("{}/../../docs/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub fn resolve<'a>(spec: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r
                .strip_prefix("#/components/schemas/")
                .expect("local refs only");
            &spec["components"]["schemas"][name]
        }
        None => schema,
    }
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "integer" => v.is_u64() || v.is_i64(),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "null" => v.is_null(),
        other => panic!("schema type {other} not handled"),
    }
}

/// Checks `v` against the subset of JSON Schema the spec uses.
pub fn check(spec: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    let schema = resolve(spec, schema);
    if let Some(alts) = schema.get("oneOf").and_then(Value::as_array) {
        let ok = alts
            .iter()
            .filter(|s| check(spec, s, v, at).is_ok())
            .count();
        return if ok == 1 {
            Ok(())
        } else {
            Err(format!("{at}: {v} matches {ok} of the oneOf alternatives"))
        };
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if !types.is_empty() && !types.iter().any(|t| type_matches(t, v)) {
        return Err(format!("{at}: {v} is none of {types:?}"));
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            return Err(format!("{at}: {v} not in {e:?}"));
        }
    }
    if let Some(obj) = v.as_object() {
        for r in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !obj.contains_key(r.as_str().unwrap_or_default()) {
                return Err(format!("{at}: missing {r}"));
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, val) in obj {
            match (
                props.and_then(|p| p.get(k)),
                schema.get("additionalProperties"),
            ) {
                (Some(s), _) => check(spec, s, val, &format!("{at}.{k}"))?,
                (None, Some(s)) if s.is_object() => check(spec, s, val, &format!("{at}.{k}"))?,
                (None, Some(Value::Bool(false))) => {
                    return Err(format!("{at}: unexpected property {k}"))
                }
                (None, _) => {}
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            check(spec, items, x, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

/// `v` read as a `T`, which must give back exactly `v`: no field the type lacks, none it adds.
pub fn typed<T: DeserializeOwned + Serialize>(v: &Value, at: &str) -> T {
    let t: T = serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("{at}: not a {}: {e}: {v}", std::any::type_name::<T>()));
    assert_eq!(
        &serde_json::to_value(&t).unwrap(),
        v,
        "{at}: the API type does not carry every field"
    );
    t
}

/// Compares the fields of `v` (an API type serialized with every optional part present) with
/// `schema`, recursively: the same names both ways, all of them required. Records the component
/// schemas it went through in `seen`.
pub fn same_fields(spec: &Value, schema: &Value, v: &Value, at: &str, seen: &mut Vec<String>) {
    if let Some(name) = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
    {
        if !seen.iter().any(|s| s == name) {
            seen.push(name.to_owned());
        }
    }
    let schema = resolve(spec, schema);
    if let Some(alts) = schema.get("oneOf").and_then(Value::as_array) {
        let alt = alts
            .iter()
            .find(|a| a.get("type") != Some(&Value::from("null")))
            .unwrap_or_else(|| panic!("{at}: a oneOf without a non-null alternative"));
        return same_fields(spec, alt, v, at, seen);
    }
    if let Some(items) = v.as_array() {
        assert!(!items.is_empty(), "{at}: give the sample an element");
        for (i, x) in items.iter().enumerate() {
            same_fields(spec, &schema["items"], x, &format!("{at}[{i}]"), seen);
        }
        return;
    }
    let Some(obj) = v.as_object() else { return };
    match schema.get("properties").and_then(Value::as_object) {
        Some(props) => {
            let mut fields: Vec<&String> = obj.keys().collect();
            let mut documented: Vec<&String> = props.keys().collect();
            fields.sort();
            documented.sort();
            assert_eq!(
                fields, documented,
                "{at}: the type's fields (left) and the schema's (right)"
            );
            if !is_request(spec, at) {
                let mut required: Vec<&str> = schema["required"]
                    .as_array()
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                required.sort_unstable();
                assert_eq!(
                    required,
                    documented.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
                    "{at}: the server always sends every field, so the schema requires them all"
                );
            }
            for (k, x) in obj {
                same_fields(spec, &props[k], x, &format!("{at}.{k}"), seen);
            }
        }
        None => {
            let each = &schema["additionalProperties"];
            assert!(
                each.is_object(),
                "{at}: an object with neither properties nor a map schema"
            );
            assert!(!obj.is_empty(), "{at}: give the sample an entry");
            for (k, x) in obj {
                same_fields(spec, each, x, &format!("{at}.{k}"), seen);
            }
        }
    }
}

/// The operation of `spec` for `method` on `path`, matching templated segments (`{name}`).
fn operation<'a>(spec: &'a Value, method: &str, path: &str) -> &'a Value {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let segs: Vec<&str> = path.split('/').collect();
    let key = spec["paths"]
        .as_object()
        .unwrap()
        .keys()
        .find(|k| {
            let ks: Vec<&str> = k.split('/').collect();
            ks.len() == segs.len()
                && ks
                    .iter()
                    .zip(&segs)
                    .all(|(k, s)| k == s || (k.starts_with('{') && k.ends_with('}')))
        })
        .unwrap_or_else(|| panic!("{path} is not in the published schema"));
    &spec["paths"][key][method.to_ascii_lowercase()]
}

/// Calls the API and checks the answer against the documented statuses and schemas (and a
/// request the server accepted against the request schema); returns status and body.
pub fn call_checked(
    spec: &Value,
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, Value) {
    let r = memvisor_api::exchange(sock, method, path, body, memvisor_api::CALL_TIMEOUT).unwrap();
    let (status, text) = (r.status, r.body);
    assert_eq!(
        r.content_type.as_deref(),
        Some("application/json"),
        "{method} {path}"
    );
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"));
    let op = operation(spec, method, path);
    if let (200, Some(Ok(req))) = (status, body.map(serde_json::from_str::<Value>)) {
        let schema = &op["requestBody"]["content"]["application/json"]["schema"];
        if let Err(e) = check(spec, schema, &req, &format!("{method} {path} request")) {
            panic!("the server accepted a request the schema forbids: {e}");
        }
    }
    let resp = &op["responses"][status.to_string()];
    assert!(
        resp.is_object(),
        "{method} {path} answered {status}, which the spec does not document: {text}"
    );
    if let Err(e) = check(
        spec,
        &resp["content"]["application/json"]["schema"],
        &v,
        &format!("{method} {path} {status}"),
    ) {
        panic!("answer does not match the schema: {e}");
    }
    (status, v)
}

/// The status of a body-less `METHOD PATH` the API does not document (nothing to check it
/// against).
pub fn status_of(sock: &Path, method: &str, path: &str) -> u16 {
    memvisor_api::call(sock, method, path, None).unwrap().0
}

/// `GET path`, whose documented answer is text (not JSON): checks that the status is documented
/// with exactly one media type, that the server's `Content-Type` is that type (its parameters
/// aside), and that the schema is a string; returns the status and the text.
pub fn get_text_checked(spec: &Value, sock: &Path, path: &str) -> (u16, String) {
    let r = memvisor_api::exchange(sock, "GET", path, None, memvisor_api::CALL_TIMEOUT).unwrap();
    let resp = &operation(spec, "GET", path)["responses"][r.status.to_string()];
    assert!(
        resp.is_object(),
        "GET {path} answered {}, which the spec does not document: {}",
        r.status,
        r.body
    );
    let content = resp["content"].as_object().unwrap();
    assert_eq!(content.len(), 1, "GET {path}: one media type");
    let (media, schema) = content.iter().next().unwrap();
    let sent = r.content_type.unwrap_or_default();
    assert_eq!(
        sent.split(';').next().unwrap().trim(),
        media,
        "GET {path}: the Content-Type sent ({sent}) is not the documented one"
    );
    assert_eq!(schema["schema"]["type"], "string", "GET {path}");
    (r.status, r.body)
}

/// Whether the sample at `at` is a request body: its schema lists the fields a client must
/// send (`required`), not every field, since the server fills in defaults.
fn is_request(spec: &Value, at: &str) -> bool {
    // A request's parts are sent by the client too (`IncomingRequest.vm`, a `VmSpec`).
    let within = |n: &str| at == n || at.strip_prefix(n).is_some_and(|r| r.starts_with('.'));
    spec["x-request-schemas"]
        .as_array()
        .is_some_and(|r| r.iter().filter_map(Value::as_str).any(within))
}

/// Checks that the samples (one per component schema, every optional part present) have the
/// fields of their schemas both ways, and that every component schema has a sample. Response
/// schemas require every field (the server always sends them all); request schemas named in
/// the top-level `x-request-schemas` list require what a client must send.
pub fn same_fields_as_schemas(spec: &Value, samples: &[(&str, Value)]) {
    let schema = |name: &str| serde_json::json!({ "$ref": format!("#/components/schemas/{name}") });
    let mut seen = Vec::new();
    for (name, v) in samples {
        same_fields(spec, &schema(name), v, name, &mut seen);
        if let Err(e) = check(spec, &schema(name), v, name) {
            panic!("{e}");
        }
    }
    let mut components: Vec<&String> = spec["components"]["schemas"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    components.sort();
    seen.sort();
    assert_eq!(
        components,
        seen.iter().collect::<Vec<_>>(),
        "every schema is one of the API's types, by name"
    );
}
