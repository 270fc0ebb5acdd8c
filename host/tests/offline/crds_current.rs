//! The checked-in `crds/*.yaml` are exactly what `trainforge crds` generates
//! from the API types, and they parse back into the same CRDs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use trainforge::cmd::crds;

fn crds_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds")
}

#[test]
fn checked_in_crds_are_current() {
    let stale = crds::stale_files(&crds_dir()).unwrap();
    assert!(
        stale.is_empty(),
        "crds/ is stale ({}); regenerate with `cargo run -p trainforge -- crds`",
        stale.join(", ")
    );
}

#[test]
fn only_generated_crds_are_checked_in() {
    let generated: Vec<String> = crds::render()
        .unwrap()
        .into_iter()
        .map(|f| f.name)
        .collect();
    for entry in std::fs::read_dir(crds_dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".yaml") {
            assert!(
                generated.contains(&name),
                "crds/{name} is not generated; delete it or regenerate"
            );
        }
    }
}

#[test]
fn yaml_parses_back_to_the_generated_crds() {
    let crds = trainforge_api::crds::all_crds().unwrap();
    for (file, crd) in crds::render().unwrap().iter().zip(&crds) {
        let parsed: CustomResourceDefinition = serde_saphyr::from_str(&file.content).unwrap();
        assert_eq!(&parsed, crd, "{} does not parse back", file.name);
        assert!(
            file.content.len() < 1024 * 1024,
            "{} is {} bytes",
            file.name,
            file.content.len()
        );
    }
}

#[test]
fn rendering_is_deterministic() {
    assert_eq!(crds::render().unwrap(), crds::render().unwrap());
}
