//! The chart's README: its values table is what `scripts/chart-readme` generates from
//! `values.yaml` today, and the generator refuses a value nobody documented.

use crate::tools::{read, text, tools};

#[test]
fn the_values_table_matches_values_yaml_and_every_value_is_documented() {
    let tools = tools();
    let check = tools.python("scripts/chart-readme", &["--check"]);
    assert!(
        check.status.success(),
        "helm/baton/README.md is stale: run scripts/chart-readme ({})",
        text(&check)
    );
    let readme = read("helm/baton/README.md");
    for key in [
        "database.existingSecret.name",
        "ingress.host",
        "metrics.prometheusRule.enabled",
    ] {
        assert!(readme.contains(&format!("| `{key}` |")), "{key} has a row");
    }

    // A value added without a comment is refused, by name.
    let dir = tools.scratch();
    let values = dir.join("values.yaml");
    let copy = dir.join("README.md");
    std::fs::write(&copy, &readme).expect("write README");
    let undocumented = format!("{}\nnewSetting: 1\n", read("helm/baton/values.yaml"));
    std::fs::write(&values, undocumented).expect("write values");
    let paths = |v: &std::path::Path, r: &std::path::Path| {
        [
            "--values".to_owned(),
            v.to_string_lossy().into_owned(),
            "--readme".to_owned(),
            r.to_string_lossy().into_owned(),
        ]
    };
    let args = paths(&values, &copy);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = tools.python("scripts/chart-readme", &args);
    assert!(!out.status.success(), "an undocumented value passed");
    assert!(text(&out).contains("newSetting"), "{}", text(&out));

    // A documented value the table lacks makes the check fail.
    let documented = format!(
        "{}\n# A setting added later.\nnewSetting: 1\n",
        read("helm/baton/values.yaml")
    );
    std::fs::write(&values, documented).expect("write values");
    let mut checking = args.clone();
    checking.push("--check");
    let out = tools.python("scripts/chart-readme", &checking);
    assert!(!out.status.success(), "a stale table passed the check");
    assert!(text(&out).contains("stale"), "{}", text(&out));
}
