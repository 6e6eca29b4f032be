//! Tests of `config reference`: one row per explained key with the loader's own variable
//! name, the built-in default and a meaning, and the splicing of the table into a page.

use super::super::*;
use super::{KEY, load_ok};

fn rows() -> Vec<ReferenceRow> {
    match reference_rows() {
        Ok(rows) => rows,
        Err(e) => panic!("reference failed: {e}"),
    }
}

#[test]
fn every_explained_key_has_a_row_with_its_default_and_a_meaning() {
    let explained = load_ok(Sources::default());
    let rows = rows();
    let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    let explained_keys: Vec<&str> = explained
        .explain_rows()
        .iter()
        .map(|r| r.key.as_str())
        .collect();
    assert_eq!(keys, explained_keys);
    for (row, shown) in rows.iter().zip(explained.explain_rows()) {
        let default = row.default.as_deref().unwrap_or(UNSET);
        assert_eq!(default, shown.value, "{}", row.key);
        assert!(!row.meaning.is_empty(), "{}", row.key);
        assert!(!row.meaning.contains('\n'), "{}", row.key);
    }
}

#[test]
fn each_variable_named_in_the_reference_sets_its_key() {
    // A value of the right type for every key, defaults where there are some.
    let sample = |row: &ReferenceRow| match row.key.as_str() {
        "database.url" => "sqlite:reference.db".to_owned(),
        "bus.nats_url" => "nats://127.0.0.1:4222".to_owned(),
        "bus.nats_user" => "baton".to_owned(),
        "egress.allow_loopback" => "true".to_owned(),
        "bus.nats_password" | "bus.nats_token" | "bus.nats_nkey_seed" => "secret".to_owned(),
        "bus.nats_creds_file" => "/etc/baton/nats.creds".to_owned(),
        "bus.nats_tls_ca_file" | "bus.nats_tls_cert_file" | "bus.nats_tls_key_file" => {
            "/etc/baton/nats/tls.pem".to_owned()
        }
        "crypto.keys" => KEY.to_owned(),
        "crypto.keys_dir" => "/etc/baton/keyring".to_owned(),
        "crypto.active_key" => "k1".to_owned(),
        "workspaces.environments" => "true".to_owned(),
        _ => row.default.clone().unwrap_or_else(|| panic!("{}", row.key)),
    };
    let rows = rows();
    // A map's variable names one entry through a placeholder, `<ID>`.
    let name = |row: &ReferenceRow| {
        row.env
            .replace("<ID>", "K1")
            .replace("<NAME__FIELD>", "PY__NETWORK")
    };
    let env: Vec<(String, String)> = rows.iter().map(|r| (name(r), sample(r))).collect();
    let loaded = load_ok(Sources {
        env,
        ..Sources::default()
    });
    for row in &rows {
        // `config explain` names a map by its own path, `BATON_CRYPTO__KEYS`, whichever
        // entries set it.
        let source = loaded.source_of(&row.key);
        assert!(
            matches!(source, Some(Layer::Env(var)) if name(row).starts_with(var.as_str())),
            "{}: {source:?}",
            row.key
        );
    }
    let keys = loaded
        .explain_rows()
        .iter()
        .find(|r| r.key == "crypto.keys");
    assert_eq!(keys.map(|r| r.value.as_str()), Some("k1=***"));
    let names: Vec<&str> = rows.iter().map(|r| r.env.as_str()).collect();
    assert!(names.contains(&"BATON_TIER"));
    assert!(names.contains(&"BATON_HTTP__LISTEN"));
    assert!(names.contains(&"BATON_CRYPTO__KEYS__<ID>"));
}

#[test]
fn the_markdown_is_a_table_with_escaped_cells() {
    let text = match reference_markdown() {
        Ok(text) => text,
        Err(e) => panic!("reference failed: {e}"),
    };
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("| key | default | environment variable | meaning |")
    );
    assert_eq!(lines.next(), Some("|---|---|---|---|"));
    assert_eq!(lines.count(), rows().len());
    assert!(text.ends_with("|\n"));
    assert!(text.contains("| `http.listen` | `127.0.0.1:8080` | `BATON_HTTP__LISTEN` | "));
    assert!(text.contains("| `database.url` | unset | `BATON_DATABASE__URL` | "));
}

#[test]
fn splicing_replaces_only_the_generated_block() {
    let page = format!("# Title\n\n{REFERENCE_BEGIN}\n| old |\n{REFERENCE_END}\n\nAfter.\n");
    let spliced = splice_reference(&page, "| new |\n| rows |\n");
    assert_eq!(
        spliced,
        Ok(format!(
            "# Title\n\n{REFERENCE_BEGIN}\n| new |\n| rows |\n{REFERENCE_END}\n\nAfter.\n"
        ))
    );
    let empty = format!("{REFERENCE_BEGIN}\n{REFERENCE_END}\n");
    assert_eq!(
        splice_reference(&empty, "| t |\n"),
        Ok(format!("{REFERENCE_BEGIN}\n| t |\n{REFERENCE_END}\n"))
    );
}

#[test]
fn splicing_refuses_pages_without_one_well_formed_block() {
    let missing_end = format!("{REFERENCE_BEGIN}\n| t |\n");
    assert_eq!(
        splice_reference(&missing_end, ""),
        Err(MarkerError::Missing(REFERENCE_END))
    );
    let twice = format!("{REFERENCE_BEGIN}\n{REFERENCE_END}\n{REFERENCE_BEGIN}\n");
    assert_eq!(
        splice_reference(&twice, ""),
        Err(MarkerError::Repeated(REFERENCE_BEGIN))
    );
    let reversed = format!("{REFERENCE_END}\n{REFERENCE_BEGIN}\n");
    assert_eq!(
        splice_reference(&reversed, ""),
        Err(MarkerError::OutOfOrder)
    );
    let inline = format!("see {REFERENCE_BEGIN}\n{REFERENCE_END}\n");
    assert_eq!(
        splice_reference(&inline, ""),
        Err(MarkerError::NotALine(REFERENCE_BEGIN))
    );
}

#[test]
fn updating_a_page_writes_only_when_the_table_changes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("configuration.md");
    std::fs::write(
        &path,
        format!("# Keys\n{REFERENCE_BEGIN}\n{REFERENCE_END}\n"),
    )
    .expect("write page");
    assert!(matches!(update_reference(&path), Ok(true)));
    assert!(matches!(update_reference(&path), Ok(false)));
    let page = std::fs::read_to_string(&path).expect("read page");
    let table = reference_markdown().expect("reference");
    assert_eq!(
        page,
        format!("# Keys\n{REFERENCE_BEGIN}\n{table}{REFERENCE_END}\n")
    );
    let missing = dir.path().join("missing.md");
    assert!(matches!(
        update_reference(&missing),
        Err(ReferenceError::ReadPage { .. })
    ));
}
