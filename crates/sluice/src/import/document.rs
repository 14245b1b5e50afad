//! The pipeline file the importer writes: TOML sections with keys in the order they were set,
//! each key with an optional comment. Written by hand rather than through `toml`'s serializer,
//! which has no comments and orders keys itself; values are `toml::Value`s, so their quoting is
//! `toml`'s.

/// A pipeline file being built.
#[derive(Debug, Clone, Default)]
pub struct Document {
    sections: Vec<Section>,
}

#[derive(Debug, Clone)]
struct Section {
    name: String,
    entries: Vec<Entry>,
}

#[derive(Debug, Clone)]
struct Entry {
    key: String,
    value: toml::Value,
    comment: Option<String>,
}

impl Document {
    /// Sections in this order whatever order their keys are set in (`""`: the top level).
    pub fn with_sections(names: &[&str]) -> Self {
        Self {
            sections: names
                .iter()
                .map(|name| Section {
                    name: (*name).to_owned(),
                    entries: Vec::new(),
                })
                .collect(),
        }
    }

    /// Sets `key` in `section` (added at the end when new), replacing an earlier value.
    pub fn set(
        &mut self,
        section: &str,
        key: &str,
        value: impl Into<toml::Value>,
        comment: Option<String>,
    ) {
        let index = match self.sections.iter().position(|s| s.name == section) {
            Some(index) => index,
            None => {
                self.sections.push(Section {
                    name: section.to_owned(),
                    entries: Vec::new(),
                });
                self.sections.len() - 1
            }
        };
        let entries = &mut self.sections[index].entries;
        let entry = Entry {
            key: key.to_owned(),
            value: value.into(),
            comment,
        };
        match entries.iter_mut().find(|e| e.key == key) {
            Some(existing) => *existing = entry,
            None => entries.push(entry),
        }
    }

    /// A value already set.
    pub fn get(&self, section: &str, key: &str) -> Option<&toml::Value> {
        self.sections
            .iter()
            .find(|s| s.name == section)?
            .entries
            .iter()
            .find(|e| e.key == key)
            .map(|e| &e.value)
    }

    /// Removes a key.
    pub fn remove(&mut self, section: &str, key: &str) {
        if let Some(s) = self.sections.iter_mut().find(|s| s.name == section) {
            s.entries.retain(|e| e.key != key);
        }
    }

    /// Appends to an array value (made when missing).
    pub fn push(&mut self, section: &str, key: &str, item: &str) {
        let mut items = match self.get(section, key) {
            Some(toml::Value::Array(items)) => items.clone(),
            _ => Vec::new(),
        };
        if !items.iter().any(|i| i.as_str() == Some(item)) {
            items.push(toml::Value::String(item.to_owned()));
        }
        self.set(section, key, toml::Value::Array(items), None);
    }

    /// The TOML text, `header` as leading comment lines.
    pub fn render(&self, header: &str) -> String {
        let mut out = String::new();
        for line in header.lines() {
            out.push_str(if line.is_empty() { "#" } else { "# " });
            out.push_str(line);
            out.push('\n');
        }
        for section in &self.sections {
            if section.entries.is_empty() && !section.name.is_empty() {
                continue;
            }
            if !section.name.is_empty() {
                let name: Vec<String> = split_section(&section.name)
                    .iter()
                    .map(|p| key_text(p))
                    .collect();
                out.push_str(&format!("\n[{}]\n", name.join(".")));
            }
            for entry in &section.entries {
                let line = format!("{} = {}", key_text(&entry.key), entry.value);
                match &entry.comment {
                    Some(comment) => out.push_str(&format!("{line}  # {comment}\n")),
                    None => {
                        out.push_str(&line);
                        out.push('\n');
                    }
                }
            }
        }
        out
    }
}

/// A section path: dots separate, except inside a part that is itself quoted with `"`.
fn split_section(name: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in name.chars() {
        match c {
            '"' => quoted = !quoted,
            '.' if !quoted => parts.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    parts.push(current);
    parts
}

/// A key bare when TOML allows it, else quoted.
pub fn key_text(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        key.to_owned()
    } else {
        toml::Value::String(key.to_owned()).to_string()
    }
}

/// A section name whose last part holds dots (`transforms."a.b"`): the part quoted.
pub fn section(parent: &str, part: &str) -> String {
    if part.contains('.') {
        format!("{parent}.\"{part}\"")
    } else {
        format!("{parent}.{part}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_keep_their_order_and_quote_what_needs_it() {
        let mut doc = Document::with_sections(&["", "source.postgres", "kafka"]);
        doc.set("kafka", "brokers", "${KAFKA_BROKERS}", None);
        doc.set(
            "",
            "name",
            "inventory",
            Some("the connector's name".to_owned()),
        );
        doc.set("source.postgres", "slot", "debezium", None);
        doc.set(
            &section("transforms", "un.wrap"),
            "delete.tombstone.handling.mode",
            "rewrite",
            None,
        );
        doc.push("source.postgres", "schemas", "public");
        doc.push("source.postgres", "schemas", "public");
        let text = doc.render("made by a test");
        assert_eq!(
            text,
            "# made by a test\nname = \"inventory\"  # the connector's name\n\n[source.postgres]\nslot = \"debezium\"\nschemas = [\"public\"]\n\n[kafka]\nbrokers = \"${KAFKA_BROKERS}\"\n\n[transforms.\"un.wrap\"]\n\"delete.tombstone.handling.mode\" = \"rewrite\"\n"
        );
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(
            parsed["transforms"]["un.wrap"]["delete.tombstone.handling.mode"].as_str(),
            Some("rewrite")
        );
    }
}
