//! Tagged enums (`#[serde(tag = "kind")]`) as discriminated unions of named schemas.
//!
//! utoipa describes such an enum as a `oneOf` of inline variants: a struct variant as an
//! object with the tag among its properties, a newtype variant as an `allOf` of the inner
//! type and an object holding the tag. Generators name inline variants by position, and
//! some cannot read the `allOf` form at all. So every variant that carries a title
//! (`#[schema(title = "ScriptedProvider")]` on the Rust variant) becomes a component of
//! that name, one flat object whose tag is a required `const`; the enum becomes a `oneOf`
//! of references with a `discriminator` mapping each tag value to its variant. What each
//! variant holds still comes from the derive, so it cannot drift from the Rust type.

use serde_json::{Map, Value, json};

/// Rewrites every component that is a `oneOf` of titled variants.
pub(super) fn discriminate(doc: &mut Value) {
    let Some(schemas) = doc["components"]["schemas"].as_object() else {
        return;
    };
    let unions: Vec<String> = schemas
        .iter()
        .filter(|(_, s)| {
            s["oneOf"]
                .as_array()
                .is_some_and(|items| items.iter().all(|i| i["title"].is_string()))
        })
        .map(|(name, _)| name.clone())
        .collect();
    for name in unions {
        let mut absorbed = Vec::new();
        let schemas = &mut doc["components"]["schemas"];
        let union = schemas[&name].clone();
        let mut refs = Vec::new();
        let mut mapping = Map::new();
        let mut tag_name: Option<String> = None;
        for item in union["oneOf"].as_array().into_iter().flatten() {
            let title = item["title"].as_str().unwrap_or_default().to_string();
            let mut variant = flatten(item, schemas, &mut absorbed);
            let (tag, value) = tag_of(&variant)
                .unwrap_or_else(|| panic!("variant {title} of {name} has no single-valued tag"));
            assert!(
                tag_name.get_or_insert_with(|| tag.clone()) == &tag,
                "the variants of {name} are tagged by different properties"
            );
            let mut tag_schema = json!({ "type": "string", "const": value });
            if let Some(description) = variant["properties"][&tag].get("description") {
                tag_schema["description"] = description.clone();
            }
            variant["properties"][&tag] = tag_schema;
            let reference = format!("#/components/schemas/{title}");
            mapping.insert(value, Value::String(reference.clone()));
            refs.push(json!({ "$ref": reference }));
            schemas[&title] = variant;
        }
        let mut discriminated = json!({
            "oneOf": refs,
            "discriminator": { "propertyName": tag_name, "mapping": mapping },
        });
        if let Some(description) = union.get("description") {
            discriminated["description"] = description.clone();
        }
        schemas[&name] = discriminated;
        // A newtype variant's inner type now lives on as the variant: one name for one type.
        for inner in absorbed {
            let needle = format!("\"#/components/schemas/{inner}\"");
            if !doc.to_string().contains(&needle)
                && let Some(schemas) = doc["components"]["schemas"].as_object_mut()
            {
                schemas.remove(&inner);
            }
        }
    }
}

/// A variant as one object: an `allOf` of references and inline objects is merged
/// (properties, required fields), the names of the referenced components kept in
/// `absorbed`. The variant's own description wins over its inner type's.
fn flatten(item: &Value, schemas: &Value, absorbed: &mut Vec<String>) -> Value {
    let mut object = json!({ "type": "object", "properties": {} });
    let parts = match item["allOf"].as_array() {
        Some(parts) => parts.clone(),
        None => vec![item.clone()],
    };
    for part in parts {
        let part = match part["$ref"].as_str() {
            Some(r) => {
                let inner = r.trim_start_matches("#/components/schemas/").to_string();
                let resolved = schemas[&inner].clone();
                absorbed.push(inner);
                resolved
            }
            None => part,
        };
        for (key, value) in part.as_object().into_iter().flatten() {
            match key.as_str() {
                "properties" => {
                    for (p, s) in value.as_object().into_iter().flatten() {
                        object["properties"][p] = s.clone();
                    }
                }
                "required" => {
                    let mut required = object["required"].as_array().cloned().unwrap_or_default();
                    for r in value.as_array().into_iter().flatten() {
                        if !required.contains(r) {
                            required.push(r.clone());
                        }
                    }
                    object["required"] = Value::Array(required);
                }
                "title" | "$ref" => {}
                _ => object[key] = value.clone(),
            }
        }
    }
    if let Some(description) = item.get("description") {
        object["description"] = description.clone();
    }
    object
}

/// The variant's tag: a required string property that allows exactly one value.
fn tag_of(variant: &Value) -> Option<(String, String)> {
    let required = variant["required"].as_array()?;
    variant["properties"]
        .as_object()?
        .iter()
        .find_map(|(name, schema)| {
            let values = schema["enum"].as_array()?;
            let [Value::String(value)] = values.as_slice() else {
                return None;
            };
            required
                .contains(&Value::String(name.clone()))
                .then(|| (name.clone(), value.clone()))
        })
}
