//! `asyncapi --html`: the document as one standalone HTML page (see [`super::to_html`]).

use std::fmt::Write as _;

use serde_json::Value;

/// `text` with `&`, `<`, `>`, `"` and `'` escaped: safe as element text and as an
/// attribute value (subject patterns end in `>`, type names hold `<`).
fn esc(text: &str) -> String {
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

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A `#/channels/{id}` (or `#/channels/{id}/messages/{m}`) reference, as a link to its
/// section.
fn link(reference: &Value, document: &Value) -> String {
    let Some(path) = reference["$ref"].as_str() else {
        return String::new();
    };
    let parts: Vec<&str> = path.trim_start_matches("#/").split('/').collect();
    match parts.as_slice() {
        ["channels", channel] => {
            let label = document["channels"][*channel]["address"]
                .as_str()
                .unwrap_or("the requester's inbox");
            format!(
                "<a href=\"#channel-{}\"><code>{}</code></a>",
                esc(channel),
                esc(label)
            )
        }
        ["channels", channel, "messages", message] => format!(
            "<a href=\"#message-{}-{}\">{}</a>",
            esc(channel),
            esc(message),
            esc(message)
        ),
        _ => format!("<code>{}</code>", esc(path)),
    }
}

/// The non-null fields of `object` as a definition list.
fn fields(object: &Value) -> String {
    let Some(map) = object.as_object() else {
        return String::new();
    };
    let mut out = String::from("<dl class=\"fields\">");
    for (key, value) in map.iter().filter(|(_, v)| !v.is_null()) {
        let shown = match value {
            Value::Object(_) | Value::Array(_) => format!(
                "<code>{}</code>",
                esc(&serde_json::to_string(value).unwrap_or_default())
            ),
            other => esc(&text(other)),
        };
        let _ = write!(out, "<dt>{}</dt><dd>{shown}</dd>", esc(key));
    }
    out.push_str("</dl>");
    out
}

fn servers(document: &Value, out: &mut String) {
    out.push_str("<section id=\"servers\"><h2>Servers</h2><table><thead><tr><th>name</th><th>protocol</th><th>host</th><th>description</th><th>security</th></tr></thead><tbody>");
    if let Some(servers) = document["servers"].as_object() {
        for (name, server) in servers {
            // Each scheme by its id and AsyncAPI type: `nats_token (apiKey)`.
            let security: Vec<String> = server["security"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["$ref"].as_str()?.rsplit('/').next())
                .map(|id| {
                    let kind = &document["components"]["securitySchemes"][id]["type"];
                    format!("{id} ({})", text(kind))
                })
                .collect();
            let _ = write!(
                out,
                "<tr id=\"server-{}\"><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                esc(name),
                esc(name),
                esc(&text(&server["protocol"])),
                esc(&text(&server["host"])),
                esc(&text(&server["description"])),
                esc(&security.join(", ")),
            );
        }
    }
    out.push_str("</tbody></table></section>");
}

fn channels(document: &Value, out: &mut String) {
    out.push_str("<section id=\"channels\"><h2>Channels</h2>");
    for (id, channel) in document["channels"].as_object().into_iter().flatten() {
        let address = channel["address"]
            .as_str()
            .unwrap_or("the requester's inbox");
        let _ = write!(
            out,
            "<article class=\"channel\" id=\"channel-{}\"><h3><code class=\"address\">{}</code></h3>",
            esc(id),
            esc(address)
        );
        if let Some(description) = channel["description"].as_str() {
            let _ = write!(out, "<p>{}</p>", esc(description));
        }
        if channel["x-ruststream-jetstream"].is_object() {
            out.push_str("<p class=\"label\">JetStream</p>");
            out.push_str(&fields(&channel["x-ruststream-jetstream"]));
        }
        for (message_id, message) in channel["messages"].as_object().into_iter().flatten() {
            let _ = write!(
                out,
                "<div class=\"message\" id=\"message-{}-{}\"><h4>{} <small>{}</small></h4><p class=\"content-type\">{}</p>",
                esc(id),
                esc(message_id),
                esc(&text(&message["title"])),
                esc(message_id),
                esc(&text(&message["contentType"])),
            );
            if let Some(description) = message["description"].as_str() {
                let _ = write!(out, "<p>{}</p>", esc(description));
            }
            if !message["payload"].is_null() {
                let schema = serde_json::to_string_pretty(&message["payload"]).unwrap_or_default();
                let _ = write!(
                    out,
                    "<details open><summary>payload schema (JSON Schema draft 7)</summary><pre class=\"schema\">{}</pre></details>",
                    esc(&schema)
                );
            }
            out.push_str("</div>");
        }
        out.push_str("</article>");
    }
    out.push_str("</section>");
}

fn operations(document: &Value, out: &mut String) {
    out.push_str("<section id=\"operations\"><h2>Operations</h2>");
    for (id, operation) in document["operations"].as_object().into_iter().flatten() {
        let action = text(&operation["action"]);
        let _ = write!(
            out,
            "<article class=\"operation\" id=\"operation-{}\"><h3><span class=\"action {}\">{}</span> <code>{}</code></h3>",
            esc(id),
            esc(&action),
            esc(&action),
            esc(id)
        );
        if let Some(summary) = operation["summary"].as_str() {
            let _ = write!(out, "<p>{}</p>", esc(summary));
        }
        let _ = write!(
            out,
            "<p>channel: {}</p>",
            link(&operation["channel"], document)
        );
        let messages: Vec<String> = operation["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| link(m, document))
            .collect();
        if !messages.is_empty() {
            let _ = write!(out, "<p>messages: {}</p>", messages.join(", "));
        }
        if operation["reply"].is_object() {
            let _ = write!(
                out,
                "<p class=\"reply\">replies on {}</p>",
                link(&operation["reply"]["channel"], document)
            );
        }
        if let Some(queue) = operation["bindings"]["nats"]["queue"].as_str() {
            let _ = write!(out, "<p>queue group <code>{}</code></p>", esc(queue));
        }
        if operation["x-ruststream"].is_object() {
            out.push_str(&fields(&operation["x-ruststream"]));
        }
        out.push_str("</article>");
    }
    out.push_str("</section>");
}

fn streams(document: &Value, out: &mut String) {
    let Some(streams) = document["x-ruststream-streams"].as_array() else {
        return;
    };
    out.push_str("<section id=\"streams\"><h2>Declared streams</h2><table><thead><tr><th>stream</th><th>subjects</th></tr></thead><tbody>");
    for stream in streams {
        let subjects: Vec<String> = stream["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| format!("<code>{}</code>", esc(&text(s))))
            .collect();
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td></tr>",
            esc(&text(&stream["name"])),
            subjects.join(" ")
        );
    }
    out.push_str("</tbody></table></section>");
}

/// Builds the table of contents from the embedded document, then marks the page rendered.
const SCRIPT: &str = r##"(function () {
  var doc = JSON.parse(document.getElementById("asyncapi-document").textContent);
  var nav = document.getElementById("contents");
  [["Channels", "channel-", doc.channels || {}, function (id, c) { return c.address || "the requester's inbox"; }],
   ["Operations", "operation-", doc.operations || {}, function (id) { return id; }]].forEach(function (group) {
var heading = document.createElement("h2");
heading.textContent = group[0];
nav.appendChild(heading);
var list = document.createElement("ul");
Object.keys(group[2]).forEach(function (id) {
  var item = document.createElement("li");
  var a = document.createElement("a");
  a.href = "#" + group[1] + id;
  a.textContent = group[3](id, group[2][id]);
  item.appendChild(a);
  list.appendChild(item);
});
nav.appendChild(list);
  });
  document.body.setAttribute("data-rendered", "true");
})();"##;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;display:flex;color:#1b1f24}\
nav{position:sticky;top:0;align-self:flex-start;max-height:100vh;overflow:auto;min-width:16rem;padding:1rem;background:#f3f5f7;font-size:.9rem}\
nav ul{padding-left:1rem}main{padding:1rem 2rem;max-width:60rem}\
table{border-collapse:collapse}td,th{border:1px solid #d0d7de;padding:.3rem .6rem;text-align:left}\
article{border:1px solid #d0d7de;border-radius:6px;padding:.5rem 1rem;margin:1rem 0}\
.message{border-left:3px solid #8c959f;padding-left:.8rem;margin:.6rem 0}\
.action{font-size:.8rem;text-transform:uppercase;padding:.1rem .4rem;border-radius:4px;color:#fff;background:#57606a}\
.action.receive{background:#1a7f37}.action.send{background:#0969da}\
pre{background:#f6f8fa;padding:.6rem;overflow:auto}dl.fields{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem}\
dt{font-weight:600}dd{margin:0}.content-type,.label{color:#57606a;font-size:.85rem}";

pub(super) fn page(document: &Value) -> String {
    let title = text(&document["info"]["title"]);
    let version = text(&document["info"]["version"]);
    let spec = text(&document["asyncapi"]);
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{} {}: AsyncAPI {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<nav id=\"contents\" aria-label=\"Contents\"></nav>\n<main>\n<header><h1>{} <small class=\"version\">{}</small></h1><p>{}</p><p class=\"label\">AsyncAPI {}, default content type <code>{}</code></p>",
        esc(&title),
        esc(&version),
        esc(&spec),
        esc(&title),
        esc(&version),
        esc(&text(&document["info"]["description"])),
        esc(&spec),
        esc(&text(&document["defaultContentType"])),
    );
    // The app's metadata: contact, license, tags, external docs, when set.
    let about: serde_json::Map<String, Value> = ["contact", "license", "tags", "externalDocs"]
        .into_iter()
        .filter_map(|key| Some((key.to_owned(), document["info"].get(key)?.clone())))
        .collect();
    if !about.is_empty() {
        out.push_str(&fields(&Value::Object(about)));
    }
    out.push_str("</header>\n");
    servers(document, &mut out);
    channels(document, &mut out);
    operations(document, &mut out);
    streams(document, &mut out);
    // `<` as `\u003c`: still the same JSON, and no `</script>` can end the element early.
    let embedded = serde_json::to_string(document)
        .unwrap_or_default()
        .replace('<', "\\u003c");
    let _ = write!(
        out,
        "\n</main>\n<script type=\"application/json\" id=\"asyncapi-document\">{embedded}</script>\n<script>{SCRIPT}</script>\n</body>\n</html>\n"
    );
    out
}
