//! The JSON Schema of a type read from its serde `Deserialize` impl ([`traced_schema`]): what
//! `asyncapi` shows for a payload or a reply whose type declares no `schemars::JsonSchema`.
//!
//! `serde-reflection` deserializes the type once (more for enums, a variant each time) from a
//! tracing deserializer, which records every container, field and variant the serde derive
//! asks for: the names are the ones on the wire (`rename`, `rename_all` applied). That data
//! model is then written as the JSON Schema (draft 7) of its JSON form, the way `serde_json`
//! writes it: structs are objects, `Option` fields may be missing or `null`, enums are
//! externally tagged. A type whose `Deserialize` impl cannot be traced (untagged or internally
//! tagged enums, `flatten`, `serde_json::Value`, a validating impl that refuses the tracer's
//! sample values) has no traced schema: `None`, and the document says its schema is not
//! declared.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use serde_reflection::{
    ContainerFormat, Format, Named, Registry, Samples, Tracer, TracerConfig, VariantFormat,
};

/// How many passes a type with enums nested in it gets at most: each pass takes one more
/// variant of each enum it meets.
const MAX_PASSES: usize = 64;

/// The JSON Schema (draft 7) of `T`'s JSON form, read from its `Deserialize` impl; `None`
/// when the impl cannot be traced.
pub fn traced_schema<T: DeserializeOwned>() -> Option<Value> {
    let (root, registry) = trace::<T>()?;
    let mut definitions = Map::new();
    for (name, container) in &registry {
        definitions.insert(name.clone(), container_schema(container));
    }
    // The root is usually a container: its schema is the document itself (and stays among
    // the definitions, for a type that contains itself).
    let mut schema = match &root {
        Format::TypeName(name) => definitions.get(name)?.clone(),
        other => format_schema(other),
    };
    if let Value::Object(map) = &mut schema
        && references(map, &definitions)
    {
        map.insert("definitions".to_owned(), Value::Object(definitions));
    }
    Some(schema)
}

/// The root format and every container `T` uses, each enum with all its variants.
///
/// A pass deserializes `T` once and takes one more variant of each enum it meets, as long as
/// the enum is not marked incomplete (a marked one is read at its first variant only). The
/// tracer marks the enums it has not finished; clearing the marks of the enums nested in `T`
/// between passes, the way `Tracer::trace_type` does for `T` itself, lets the next pass take
/// their next variants. Their names come from the registry's `MissingVariants` error: a new
/// tracer then runs with those names known, until no enum is missing a variant.
fn trace<T: DeserializeOwned>() -> Option<(Format, Registry)> {
    let samples = Samples::new();
    let mut nested: Vec<String> = Vec::new();
    loop {
        let mut tracer = Tracer::new(config());
        let mut root = None;
        for _ in 0..MAX_PASSES {
            let (format, _) = tracer.trace_type::<T>(&samples).ok()?;
            root = Some(format);
            let mut unfinished = false;
            for name in &nested {
                unfinished |= tracer.check_incomplete_enum(name).is_some();
            }
            if !unfinished {
                break;
            }
        }
        match tracer.registry() {
            Ok(registry) => return root.map(|root| (root, registry)),
            Err(serde_reflection::Error::MissingVariants(missing)) => {
                let known = nested.len();
                for name in missing {
                    if !nested.contains(&name) {
                        nested.push(name);
                    }
                }
                if nested.len() == known {
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
}

/// JSON is a human-readable format (types such as timestamps choose their string form), and
/// numbers start at 1 so that `NonZero*` fields trace.
fn config() -> TracerConfig {
    TracerConfig::default()
        .is_human_readable(true)
        .default_u8_value(1)
        .default_u16_value(1)
        .default_u32_value(1)
        .default_u64_value(1)
        .default_u128_value(1)
        .default_i8_value(1)
        .default_i16_value(1)
        .default_i32_value(1)
        .default_i64_value(1)
        .default_i128_value(1)
}

fn container_schema(container: &ContainerFormat) -> Value {
    match container {
        ContainerFormat::UnitStruct => json!({ "type": "null" }),
        ContainerFormat::NewTypeStruct(inner) => format_schema(inner),
        ContainerFormat::TupleStruct(items) => tuple_schema(items),
        ContainerFormat::Struct(fields) => object_schema(fields),
        ContainerFormat::Enum(variants) => {
            let mut names = Vec::new();
            let mut tagged = Vec::new();
            for Named { name, value } in variants.values() {
                let content = match value {
                    VariantFormat::Unit => {
                        names.push(Value::String(name.clone()));
                        continue;
                    }
                    VariantFormat::NewType(inner) => format_schema(inner),
                    VariantFormat::Tuple(items) => tuple_schema(items),
                    VariantFormat::Struct(fields) => object_schema(fields),
                    VariantFormat::Variable(_) => json!({}),
                };
                tagged.push(json!({
                    "type": "object",
                    "properties": { name.as_str(): content },
                    "required": [name],
                    "additionalProperties": false,
                }));
            }
            let mut one_of = Vec::new();
            if !names.is_empty() {
                one_of.push(json!({ "type": "string", "enum": names }));
            }
            one_of.extend(tagged);
            match <[Value; 1]>::try_from(one_of) {
                Ok([only]) => only,
                Err(one_of) => json!({ "oneOf": one_of }),
            }
        }
    }
}

/// A struct's fields: an `Option` field may be missing (serde reads a missing one as `None`).
fn object_schema(fields: &[Named<Format>]) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for Named { name, value } in fields {
        properties.insert(name.clone(), format_schema(value));
        if !matches!(value, Format::Option(_)) {
            required.push(Value::String(name.clone()));
        }
    }
    json!({ "type": "object", "properties": properties, "required": required })
}

fn tuple_schema(items: &[Format]) -> Value {
    json!({
        "type": "array",
        "items": items.iter().map(format_schema).collect::<Vec<_>>(),
        "minItems": items.len(),
        "maxItems": items.len(),
    })
}

fn format_schema(format: &Format) -> Value {
    let unsigned =
        |bits: u32| json!({ "type": "integer", "minimum": 0, "format": format!("uint{bits}") });
    let signed = |bits: u32| json!({ "type": "integer", "format": format!("int{bits}") });
    match format {
        Format::TypeName(name) => json!({ "$ref": format!("#/definitions/{name}") }),
        Format::Unit => json!({ "type": "null" }),
        Format::Bool => json!({ "type": "boolean" }),
        Format::I8 => signed(8),
        Format::I16 => signed(16),
        Format::I32 => signed(32),
        Format::I64 => signed(64),
        Format::I128 => signed(128),
        Format::U8 => unsigned(8),
        Format::U16 => unsigned(16),
        Format::U32 => unsigned(32),
        Format::U64 => unsigned(64),
        Format::U128 => unsigned(128),
        Format::F32 | Format::F64 => json!({ "type": "number" }),
        Format::Char => json!({ "type": "string", "minLength": 1, "maxLength": 1 }),
        Format::Str => json!({ "type": "string" }),
        // serde_json writes bytes as an array of numbers.
        Format::Bytes => json!({
            "type": "array",
            "items": { "type": "integer", "minimum": 0, "maximum": 255 },
        }),
        Format::Option(inner) => json!({ "anyOf": [format_schema(inner), { "type": "null" }] }),
        Format::Seq(inner) => json!({ "type": "array", "items": format_schema(inner) }),
        // JSON keys are strings; serde_json writes number keys as strings too.
        Format::Map { value, .. } => json!({
            "type": "object",
            "additionalProperties": format_schema(value),
        }),
        Format::Tuple(items) => tuple_schema(items),
        Format::TupleArray { content, size } => json!({
            "type": "array",
            "items": format_schema(content),
            "minItems": size,
            "maxItems": size,
        }),
        // Not known after tracing (a type the tracer never reached): anything.
        Format::Variable(_) => json!({}),
    }
}

/// Whether `schema` uses `#/definitions/..` (the definitions only refer to one another when
/// the schema refers to one of them).
fn references(schema: &Map<String, Value>, definitions: &Map<String, Value>) -> bool {
    !definitions.is_empty()
        && schema
            .values()
            .any(|v| v.to_string().contains("\"#/definitions/"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Item {
        sku: String,
        quantity: u32,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "snake_case")]
    #[allow(dead_code)]
    enum Status {
        Pending,
        Captured { at: String },
        Refunded(u64),
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Order {
        id: u64,
        #[serde(rename = "customerName")]
        customer: String,
        note: Option<String>,
        items: Vec<Item>,
        status: Status,
        tags: BTreeMap<String, f64>,
        urgent: bool,
    }

    #[test]
    fn a_struct_is_an_object_with_wire_names_and_optional_options() {
        let schema = traced_schema::<Order>().expect("traced");
        assert_eq!(schema["type"], "object");
        let required: Vec<&str> = schema["required"]
            .as_array()
            .expect("required")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(
            required,
            ["id", "customerName", "items", "status", "tags", "urgent"]
        );
        let p = &schema["properties"];
        assert_eq!(p["id"]["type"], "integer");
        assert_eq!(p["id"]["minimum"], 0);
        assert_eq!(p["note"]["anyOf"][1]["type"], "null");
        assert_eq!(p["items"]["items"]["$ref"], "#/definitions/Item");
        assert_eq!(p["tags"]["additionalProperties"]["type"], "number");
        assert_eq!(p["urgent"]["type"], "boolean");
        assert_eq!(
            schema["definitions"]["Item"]["properties"]["quantity"]["type"],
            "integer"
        );
    }

    #[test]
    fn a_nested_enum_has_every_variant_externally_tagged() {
        let schema = traced_schema::<Order>().expect("traced");
        let status = &schema["definitions"]["Status"]["oneOf"];
        assert_eq!(status[0], json!({ "type": "string", "enum": ["pending"] }));
        let tagged: Vec<&str> = status
            .as_array()
            .expect("oneOf")
            .iter()
            .skip(1)
            .filter_map(|v| v["required"][0].as_str())
            .collect();
        assert_eq!(tagged, ["captured", "refunded"]);
    }

    #[test]
    fn an_untraceable_type_has_no_schema() {
        #[derive(Deserialize)]
        #[serde(untagged)]
        #[allow(dead_code)]
        enum Either {
            A(u64),
            B(String),
        }
        assert_eq!(traced_schema::<Either>(), None);
        assert_eq!(traced_schema::<serde_json::Value>(), None);
    }

    #[test]
    fn a_type_that_contains_itself_refers_to_its_own_definition() {
        #[derive(Deserialize, serde::Serialize)]
        struct Category {
            name: String,
            children: Vec<Category>,
        }
        let schema = traced_schema::<Category>().expect("traced");
        assert_eq!(
            schema["properties"]["children"]["items"]["$ref"],
            "#/definitions/Category"
        );
        let validator = jsonschema::validator_for(&schema).expect("a valid schema");
        let tree = Category {
            name: "root".into(),
            children: vec![Category {
                name: "leaf".into(),
                children: vec![],
            }],
        };
        assert!(validator.is_valid(&serde_json::to_value(&tree).expect("serializes")));
        assert!(!validator.is_valid(&json!({"name": "root", "children": [{"name": 1}]})));
    }

    #[test]
    fn a_primitive_payload_is_its_json_type() {
        assert_eq!(traced_schema::<String>(), Some(json!({ "type": "string" })));
        assert_eq!(
            traced_schema::<Vec<bool>>(),
            Some(json!({ "type": "array", "items": { "type": "boolean" } }))
        );
    }

    #[test]
    fn a_schema_validates_what_serde_json_writes() {
        #[derive(Deserialize, serde::Serialize)]
        struct Payment {
            id: u64,
            amount_cents: u64,
            memo: Option<String>,
            kind: Kind,
        }
        #[derive(Deserialize, serde::Serialize)]
        enum Kind {
            Card,
            Wire { iban: String },
        }
        let schema = traced_schema::<Payment>().expect("traced");
        let validator = jsonschema::validator_for(&schema).expect("a valid schema");
        for payment in [
            Payment {
                id: 1,
                amount_cents: 250,
                memo: None,
                kind: Kind::Card,
            },
            Payment {
                id: 2,
                amount_cents: 9,
                memo: Some("rent".into()),
                kind: Kind::Wire {
                    iban: "DE00".into(),
                },
            },
        ] {
            let value = serde_json::to_value(&payment).expect("serializes");
            assert!(validator.is_valid(&value), "{value} against {schema}");
        }
        assert!(!validator.is_valid(&json!({ "id": "one", "amount_cents": 1, "kind": "Card" })));
        assert!(!validator.is_valid(&json!({ "id": 1, "amount_cents": 1, "kind": "Cash" })));
    }
}
