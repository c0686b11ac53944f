//! `GET /v1/docs`: the API reference as one self-contained HTML page, rendered on the
//! server from the OpenAPI document of [`super::openapi`]: every operation with its
//! method, path, summary, parameters, request body and responses, then every schema.
//! No JavaScript and no external assets; every text from the document is escaped.

use std::fmt::{self, Write as _};
use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::openapi::document_json;

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// The API reference, as HTML.
#[utoipa::path(
    get,
    path = "/v1/docs",
    operation_id = "apiReference",
    tag = "Reference",
    security(()),
    responses(
        (status = 200, description = "This document as an HTML page", content_type = "text/html", body = String),
    )
)]
pub async fn page() -> impl IntoResponse {
    static PAGE: OnceLock<String> = OnceLock::new();
    let html = PAGE.get_or_init(|| render(&parse(document_json())));
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        html.as_str(),
    )
}

/// JSON that keeps the order of object keys, so the page lists paths and fields in
/// the document's order (serde_json's `Value` sorts keys unless its `preserve_order`
/// feature is on, which would change it for the whole workspace).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

static NULL: Value = Value::Null;

impl Value {
    fn get(&self, key: &str) -> Option<&Value> {
        self.as_object()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    fn as_object(&self) -> Option<&[(String, Value)]> {
        match self {
            Value::Object(fields) => Some(fields),
            _ => None,
        }
    }
}

impl std::ops::Index<&str> for Value {
    type Output = Value;

    fn index(&self, key: &str) -> &Value {
        self.get(key).unwrap_or(&NULL)
    }
}

/// Compact JSON.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quoted = |s: &str| serde_json::Value::from(s).to_string();
        match self {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Number(n) => write!(f, "{n}"),
            Value::String(s) => f.write_str(&quoted(s)),
            Value::Array(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    write!(f, "{}{item}", if i == 0 { "" } else { "," })?;
                }
                f.write_str("]")
            }
            Value::Object(fields) => {
                f.write_str("{")?;
                for (i, (k, v)) in fields.iter().enumerate() {
                    write!(f, "{}{}:{v}", if i == 0 { "" } else { "," }, quoted(k))?;
                }
                f.write_str("}")
            }
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("JSON")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Value, E> {
                Ok(Value::Bool(b))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Value, E> {
                Ok(Value::Number(n.into()))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Value, E> {
                Ok(Value::Number(n.into()))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Value, E> {
                Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
                Ok(Value::String(s.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Value::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
                let mut fields = Vec::new();
                while let Some(field) = map.next_entry()? {
                    fields.push(field);
                }
                Ok(Value::Object(fields))
            }
        }
        d.deserialize_any(V)
    }
}

/// The document as [`Value`]; it is our own output, so it always parses.
pub(super) fn parse(json: &str) -> Value {
    serde_json::from_str(json).expect("the OpenAPI document is JSON")
}

/// `&`, `<`, `>`, `"` and `'` as entities.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escaped text with `` `code` `` spans shown as code and blank lines as paragraph breaks.
fn prose(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", escape(part));
        } else {
            out.push_str(&escape(part).replace("\n\n", "<br><br>"));
        }
    }
    out
}

/// A string that can stand in an HTML `id` and a URL fragment.
fn anchor(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The name a `$ref` to `#/components/<kind>/<name>` points to.
fn ref_name(v: &Value) -> Option<&str> {
    v.get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.rsplit('/').next())
}

/// Renders the whole page.
pub(super) fn render(doc: &Value) -> String {
    let mut html = String::new();
    let info = &doc["info"];
    let title = str_of(info, "title");
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t} reference</title><style>{STYLE}</style></head><body>\
         <header><h1>{t} <small>{v}</small></h1><p>{d}</p>\
         <p>OpenAPI {o} document: <a href=\"/v1/openapi.json\">/v1/openapi.json</a></p></header>",
        t = escape(title),
        v = escape(str_of(info, "version")),
        d = prose(str_of(info, "description")),
        o = escape(str_of(doc, "openapi")),
    );

    let operations = operations(doc);
    let tags: Vec<(String, String)> = doc["tags"]
        .as_array()
        .map(|tags| {
            tags.iter()
                .map(|t| {
                    (
                        str_of(t, "name").to_owned(),
                        str_of(t, "description").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();

    html.push_str("<nav><h2>Operations</h2>");
    for (tag, _) in &tags {
        let _ = write!(
            html,
            "<h3><a href=\"#tag-{}\">{}</a></h3><ul>",
            anchor(tag),
            escape(tag)
        );
        for op in operations.iter().filter(|op| &op.tag == tag) {
            let _ = write!(
                html,
                "<li><a href=\"#op-{}\"><span class=\"m {m}\">{M}</span> {}</a><div class=\"path\">{}</div></li>",
                anchor(&op.id),
                escape(str_of(op.op, "summary")),
                escape(&op.path),
                m = op.method,
                M = op.method.to_ascii_uppercase(),
            );
        }
        html.push_str("</ul>");
    }
    html.push_str("<h3><a href=\"#schemas\">Schemas</a></h3></nav><main>");

    render_security_schemes(&mut html, doc);
    for (tag, description) in &tags {
        let _ = write!(
            html,
            "<section><h2 id=\"tag-{}\">{}</h2><p>{}</p>",
            anchor(tag),
            escape(tag),
            prose(description)
        );
        for op in operations.iter().filter(|op| &op.tag == tag) {
            render_operation(&mut html, doc, op);
        }
        html.push_str("</section>");
    }
    render_schemas(&mut html, doc);
    html.push_str("</main></body></html>\n");
    html
}

struct Operation<'a> {
    path: String,
    method: &'static str,
    id: String,
    tag: String,
    op: &'a Value,
    /// Parameters of the path item, then the operation's own.
    params: Vec<&'a Value>,
}

/// Every operation, in the document's order.
fn operations(doc: &Value) -> Vec<Operation<'_>> {
    let mut out = Vec::new();
    let Some(paths) = doc["paths"].as_object() else {
        return out;
    };
    for (path, item) in paths {
        let shared: Vec<&Value> = item["parameters"]
            .as_array()
            .map(|p| p.iter().collect())
            .unwrap_or_default();
        for method in METHODS {
            let Some(op) = item.get(method) else { continue };
            let mut params = shared.clone();
            params.extend(op["parameters"].as_array().into_iter().flatten());
            let id = match str_of(op, "operationId") {
                "" => format!("{method}-{path}"),
                id => id.to_owned(),
            };
            let tag = op["tags"]
                .as_array()
                .and_then(|t| t.first())
                .and_then(Value::as_str)
                .unwrap_or("Other")
                .to_owned();
            out.push(Operation {
                path: path.clone(),
                method,
                id,
                tag,
                op,
                params,
            });
        }
    }
    out
}

fn render_security_schemes(html: &mut String, doc: &Value) {
    let Some(schemes) = doc["components"]["securitySchemes"].as_object() else {
        return;
    };
    html.push_str("<section><h2 id=\"authentication\">Authentication</h2><dl>");
    for (name, scheme) in schemes {
        let kind = match str_of(scheme, "type") {
            "http" => format!("HTTP {}", str_of(scheme, "scheme")),
            "apiKey" => format!("{} {}", str_of(scheme, "in"), str_of(scheme, "name")),
            other => other.to_owned(),
        };
        let _ = write!(
            html,
            "<dt id=\"auth-{}\">{} <small>({})</small></dt><dd>{}</dd>",
            anchor(name),
            escape(name),
            escape(&kind),
            prose(str_of(scheme, "description"))
        );
    }
    html.push_str("</dl></section>");
}

/// The names of the security schemes an operation needs; empty when it needs none.
fn security_of<'a>(doc: &'a Value, op: &'a Value) -> Vec<&'a str> {
    let requirements = op.get("security").or_else(|| doc.get("security"));
    requirements
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .flat_map(|req| req.iter().map(|(k, _)| k.as_str()))
        .collect()
}

fn render_operation(html: &mut String, doc: &Value, op: &Operation<'_>) {
    let _ = write!(
        html,
        "<article class=\"op\" id=\"op-{}\"><h3><span class=\"m {m}\">{M}</span> <code>{}</code></h3>\
         <p class=\"summary\">{}</p>",
        anchor(&op.id),
        escape(&op.path),
        prose(str_of(op.op, "summary")),
        m = op.method,
        M = op.method.to_ascii_uppercase(),
    );
    let description = str_of(op.op, "description");
    if !description.is_empty() {
        let _ = write!(html, "<p>{}</p>", prose(description));
    }
    let security = security_of(doc, op.op);
    if security.is_empty() {
        html.push_str("<p class=\"auth\">Authentication: none.</p>");
    } else {
        let names: Vec<String> = security
            .iter()
            .map(|s| format!("<a href=\"#auth-{}\">{}</a>", anchor(s), escape(s)))
            .collect();
        let _ = write!(
            html,
            "<p class=\"auth\">Authentication: {}.</p>",
            names.join(" or ")
        );
    }

    if !op.params.is_empty() {
        html.push_str(
            "<h4>Parameters</h4><table><tr><th>Name</th><th>In</th><th>Type</th><th>Required</th>\
             <th>Description</th></tr>",
        );
        for p in &op.params {
            let p = resolve(doc, p);
            let _ = write!(
                html,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(str_of(p, "name")),
                escape(str_of(p, "in")),
                type_html(&p["schema"]),
                if p["required"].as_bool() == Some(true) {
                    "yes"
                } else {
                    "no"
                },
                prose(str_of(p, "description")),
            );
        }
        html.push_str("</table>");
    }

    if let Some(body) = op.op.get("requestBody") {
        let body = resolve(doc, body);
        let required = if body["required"].as_bool() == Some(true) {
            "required"
        } else {
            "optional"
        };
        let _ = write!(html, "<h4>Request body <small>({required})</small></h4>");
        let description = str_of(body, "description");
        if !description.is_empty() {
            let _ = write!(html, "<p>{}</p>", prose(description));
        }
        if let Some(content) = body["content"].as_object() {
            for (media_type, media) in content {
                let schema = &media["schema"];
                let _ = write!(
                    html,
                    "<p><code>{}</code>: {}</p>",
                    escape(media_type),
                    type_html(schema)
                );
                html.push_str(&properties_html(doc, resolve(doc, schema)));
            }
        }
    }

    html.push_str(
        "<h4>Responses</h4><table><tr><th>Status</th><th>Description</th><th>Body</th></tr>",
    );
    if let Some(responses) = op.op["responses"].as_object() {
        for (status, response) in responses {
            let response = resolve(doc, response);
            let mut body = String::new();
            if let Some(content) = response["content"].as_object() {
                for (media_type, media) in content {
                    let _ = write!(
                        body,
                        "<code>{}</code>: {}<br>",
                        escape(media_type),
                        type_html(&media["schema"])
                    );
                }
            }
            if let Some(headers) = response["headers"].as_object() {
                for (name, h) in headers {
                    let _ = write!(
                        body,
                        "header <code>{}</code>: {} {}<br>",
                        escape(name),
                        type_html(&h["schema"]),
                        prose(str_of(h, "description"))
                    );
                }
            }
            let _ = write!(
                html,
                "<tr><td class=\"status s{}\">{}</td><td>{}</td><td>{}</td></tr>",
                escape(status.get(..1).unwrap_or("")),
                escape(status),
                prose(str_of(response, "description")),
                body
            );
        }
    }
    html.push_str("</table></article>");
}

/// The object a `$ref` (to a component) points to, or the value itself.
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    let Some(path) = v
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/"))
    else {
        return v;
    };
    let mut target = doc;
    for part in path.split('/') {
        target = &target[part.replace("~1", "/").replace("~0", "~").as_str()];
    }
    if matches!(target, Value::Null) {
        v
    } else {
        target
    }
}

/// A one-line description of a schema's type, with links to named schemas.
fn type_html(schema: &Value) -> String {
    if let Some(name) = ref_name(schema) {
        return format!("<a href=\"#schema-{}\">{}</a>", anchor(name), escape(name));
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(parts) = schema[key].as_array() {
            let sep = if key == "allOf" { " &amp; " } else { " | " };
            let parts: Vec<String> = parts.iter().map(type_html).collect();
            return parts.join(sep);
        }
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let mut parts = Vec::new();
    for t in &types {
        parts.push(match *t {
            "array" => format!("array of {}", type_html(&schema["items"])),
            "object" => match schema.get("additionalProperties") {
                Some(extra @ Value::Object(_)) => format!("map of string to {}", type_html(extra)),
                _ => "object".to_owned(),
            },
            t => escape(t),
        });
    }
    let mut out = if parts.is_empty() {
        "any JSON value".to_owned()
    } else {
        parts.join(" | ")
    };
    let mut rules = Vec::new();
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> = values
            .iter()
            .map(|v| format!("<code>{}</code>", escape(&v.to_string())))
            .collect();
        rules.push(format!("one of {}", values.join(", ")));
    }
    for (key, label) in [
        ("format", "format"),
        ("pattern", "pattern"),
        ("minimum", "min"),
        ("maximum", "max"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
    ] {
        match &schema[key] {
            Value::Null => {}
            Value::String(s) => rules.push(format!("{label} <code>{}</code>", escape(s))),
            other => rules.push(format!("{label} {}", escape(&other.to_string()))),
        }
    }
    if !rules.is_empty() {
        let _ = write!(out, " <small>({})</small>", rules.join("; "));
    }
    out
}

/// A property's own description, else that of what it refers to (also inside a
/// `oneOf` with `null`, where utoipa puts it).
fn description_of<'a>(doc: &'a Value, property: &'a Value) -> &'a str {
    let candidates =
        std::iter::once(property).chain(property["oneOf"].as_array().into_iter().flatten());
    for candidate in candidates {
        for v in [candidate, resolve(doc, candidate)] {
            let d = str_of(v, "description");
            if !d.is_empty() {
                return d;
            }
        }
    }
    ""
}

/// A table of an object schema's properties; empty for other schemas.
fn properties_html(doc: &Value, schema: &Value) -> String {
    let Some(properties) = schema["properties"].as_object() else {
        return String::new();
    };
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut html = String::from(
        "<table class=\"props\"><tr><th>Field</th><th>Type</th><th>Required</th><th>Description</th></tr>",
    );
    for (name, property) in properties {
        let description = description_of(doc, property);
        let _ = write!(
            html,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(name),
            type_html(property),
            if required.contains(&name.as_str()) {
                "yes"
            } else {
                "no"
            },
            prose(description),
        );
    }
    html.push_str("</table>");
    if schema["additionalProperties"] == Value::Bool(false) {
        html.push_str("<p class=\"note\">No other fields are accepted.</p>");
    }
    html
}

fn render_schemas(html: &mut String, doc: &Value) {
    html.push_str("<section><h2 id=\"schemas\">Schemas</h2>");
    let schemas = doc["components"]["schemas"].as_object().unwrap_or(&[]);
    for (name, schema) in schemas {
        let _ = write!(
            html,
            "<article class=\"schema\" id=\"schema-{}\"><h3>{}</h3><p>{}</p><p>{}</p>{}",
            anchor(name),
            escape(name),
            prose(str_of(schema, "description")),
            type_html(schema),
            properties_html(doc, schema),
        );
        if let Some(examples) = schema["examples"].as_array().filter(|e| !e.is_empty()) {
            let text: Vec<String> = examples.iter().map(|e| escape(&e.to_string())).collect();
            let _ = write!(
                html,
                "<p>Example: <code>{}</code></p>",
                text.join("</code>, <code>")
            );
        }
        html.push_str("</article>");
    }
    html.push_str("</section>");
}

const STYLE: &str = "\
body{font:15px/1.5 system-ui,sans-serif;margin:0;color:#1b1f24;background:#fff;display:grid;\
grid-template-columns:minmax(16rem,22rem) 1fr}\
header{grid-column:1/3;padding:1rem 2rem;border-bottom:1px solid #d0d7de;background:#f6f8fa}\
header h1{margin:.2rem 0}header small{font-weight:normal;color:#57606a}\
nav{padding:1rem;border-right:1px solid #d0d7de;font-size:13px;position:sticky;top:0;align-self:start;\
max-height:100vh;overflow:auto}nav ul{list-style:none;padding:0;margin:0 0 1rem}nav li{margin:.2rem 0}\
nav a{text-decoration:none;color:inherit}main{padding:1rem 2rem;min-width:0}\
article{border:1px solid #d0d7de;border-radius:6px;padding:.5rem 1rem;margin:1rem 0}\
h3 code{font-size:1rem;overflow-wrap:anywhere}code{background:#f6f8fa;padding:0 .2rem;border-radius:3px}\
nav .path{font:11px monospace;color:#57606a;overflow-wrap:anywhere;margin-left:.3rem}\
td:first-child{white-space:nowrap}td small code{overflow-wrap:anywhere}\
table{border-collapse:collapse;width:100%;margin:.5rem 0}th,td{border:1px solid #d0d7de;padding:.3rem .5rem;\
text-align:left;vertical-align:top}th{background:#f6f8fa}\
.m{display:inline-block;min-width:4.2em;text-align:center;font:bold 12px monospace;color:#fff;border-radius:3px;\
padding:.1rem .3rem}.get{background:#1f6feb}.post{background:#1a7f37}.patch{background:#9a6700}\
.delete{background:#cf222e}.put{background:#8250df}\
.status{font-weight:bold}.s2{color:#1a7f37}.s4{color:#9a6700}.s5{color:#cf222e}\
.summary{font-weight:600}.auth,.note{color:#57606a;font-size:13px}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_every_character_that_matters_in_html() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn prose_shows_backticks_as_code_and_escapes_inside_them() {
        assert_eq!(
            prose("use `<b>` & go"),
            "use <code>&lt;b&gt;</code> &amp; go"
        );
    }

    #[test]
    fn every_operation_of_the_document_is_on_the_page() {
        let doc = parse(document_json());
        let html = render(&doc);
        for op in operations(&doc) {
            assert!(
                html.contains(&format!("id=\"op-{}\"", anchor(&op.id))),
                "{}",
                op.id
            );
            assert!(html.contains(&escape(&op.path)), "{}", op.path);
        }
        assert!(!html.contains("<script"), "no scripts");
    }
}
