//! The operator image without a container engine: `testenv/image.sh`
//! assembles what the top-level `Dockerfile` builds (here from the binary
//! under test) and pushes it to the test registry; the image read back from
//! the registry has the binary as its entrypoint, the builtins precompiled
//! by that binary, runs as nonroot (65532) and has no shell. Its own C
//! runtime runs the binary: as root the test `chroot`s into the unpacked
//! image as 65532; otherwise it runs the binary through the image's own
//! dynamic loader and libraries.
//!
//! Needs the test registry (testenv) and Debian's `apt-get`/`dpkg-deb` (the
//! base comes from Debian bookworm's packages); without them the test
//! skips with a note (a failure under `TRAINFORGE_TESTENV_REQUIRED=1`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::OciManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use trainforge_testenv::Registry;
use trainforge_testenv::paths::Paths;

use crate::operator_common::root;

fn missing_tools() -> Vec<&'static str> {
    [
        "apt-get",
        "apt-cache",
        "dpkg-deb",
        "tar",
        "gzip",
        "curl",
        "python3",
    ]
    .into_iter()
    .filter(|t| {
        !std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .any(|d| d.join(t).is_file())
    })
    .collect()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every file under `dir` (relative, `/`-separated), symlinks not followed.
fn tree(dir: &Path, base: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let path = e.path();
        let rel = path
            .strip_prefix(base)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if e.file_type().unwrap().is_dir() {
            tree(&path, base, out);
        }
        out.push(rel);
    }
}

#[tokio::test]
async fn the_pushed_image_runs_its_binary_and_builtins_as_nonroot_without_a_shell() {
    let paths = Paths::from_env();
    let missing = missing_tools();
    if !paths.binary("registry").is_file() || !missing.is_empty() {
        let why = format!(
            "no test registry in {} or no {missing:?}",
            paths.bin.display()
        );
        assert!(!trainforge_testenv::required(), "{why}");
        eprintln!("image test: SKIPPING: {why}");
        return;
    }
    let work = root().join("target/image-test");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("logs")).unwrap();
    let registry = Registry::start(&paths, &work.join("logs"), None)
        .await
        .unwrap();
    let reference = format!("{}/trainforge/operator:test", registry.addr());
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_trainforge"));
    let layout = work.join("layout");
    let pushed = run(Command::new(root().join("testenv/image.sh"))
        .arg("--bin")
        .arg(&bin)
        .arg("--out")
        .arg(&layout)
        .args(["--push", &reference, "--plain-http"]));
    let pinned = pushed.lines().last().unwrap_or_default().trim().to_owned();
    assert!(pinned.contains("@sha256:"), "{pushed}");

    // Read it back as a runtime would: manifest, config, layers.
    trainforge::ops::crypto::install_crypto_provider();
    let client = Client::try_from(ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    })
    .unwrap();
    let r: Reference = reference.parse().unwrap();
    let (manifest, digest) = client
        .pull_manifest(&r, &RegistryAuth::Anonymous)
        .await
        .unwrap();
    assert_eq!(Some(digest.as_str()), pinned.rsplit('@').next(), "{pinned}");
    let OciManifest::Image(manifest) = manifest else {
        panic!("not an image manifest: {manifest:?}");
    };
    let mut config = Vec::new();
    client
        .pull_blob(&r, &manifest.config, &mut config)
        .await
        .unwrap();
    let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
    let c = &config["config"];
    assert_eq!(c["User"], "65532:65532", "{config}");
    assert_eq!(c["Entrypoint"], serde_json::json!(["/trainforge"]));
    assert_eq!(c["Cmd"], serde_json::json!(["operator"]));
    assert_eq!(
        (config["os"].as_str(), config["architecture"].as_str()),
        (Some("linux"), Some("amd64"))
    );
    assert_eq!(
        manifest.layers.len(),
        2,
        "a base layer and the application's"
    );
    let rootfs = work.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    for (i, layer) in manifest.layers.iter().enumerate() {
        assert_eq!(
            layer.media_type,
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        let mut bytes = Vec::new();
        client.pull_blob(&r, layer, &mut bytes).await.unwrap();
        let file = work.join(format!("layer-{i}.tar.gz"));
        std::fs::write(&file, &bytes).unwrap();
        run(Command::new("tar")
            .arg("-xzf")
            .arg(&file)
            .arg("-C")
            .arg(&rootfs));
    }

    // The layout: the binary under test, one artifact per builtin, the
    // nonroot user, and no shell anywhere.
    assert_eq!(
        std::fs::read(rootfs.join("trainforge")).unwrap(),
        std::fs::read(&bin).unwrap(),
        "/trainforge is the binary the image was built from"
    );
    let artifacts = std::fs::read_dir(rootfs.join("trainforge-artifacts"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "cwasm")
        })
        .count();
    assert_eq!(artifacts, trainforge::plugin::builtin::all().len());
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
    assert!(
        std::fs::metadata(rootfs.join("etc/ssl/certs/ca-certificates.crt"))
            .unwrap()
            .len()
            > 100_000,
        "the CA bundle"
    );
    let mut files = Vec::new();
    tree(&rootfs, &rootfs, &mut files);
    let shells: Vec<&String> = files
        .iter()
        .filter(|f| {
            let name = f.rsplit('/').next().unwrap_or_default();
            ["sh", "bash", "dash", "busybox", "apt", "dpkg"].contains(&name)
        })
        .collect();
    assert!(shells.is_empty(), "a shell or package manager: {shells:?}");

    // The image's own C runtime runs the binary, as 65532, and the shipped
    // artifacts are the ones this binary loads (precompile finds every one
    // there and writes nothing).
    let want_version = run(Command::new(&bin).arg("--version"));
    let root_user = run(Command::new("id").arg("-u")).trim() == "0";
    let in_image = |args: &[&str]| -> String {
        if root_user {
            run(Command::new("chroot")
                .arg("--userspec=65532:65532")
                .arg(&rootfs)
                .arg("/trainforge")
                .args(args))
        } else {
            // Paths in the image are under `rootfs` here.
            let libs = rootfs.join("lib/x86_64-linux-gnu");
            let args = args.iter().map(|a| match a.strip_prefix('/') {
                Some(inside) => rootfs.join(inside).into_os_string(),
                None => a.into(),
            });
            run(Command::new(libs.join("ld-linux-x86-64.so.2"))
                .arg("--library-path")
                .arg(&libs)
                .arg(rootfs.join("trainforge"))
                .args(args))
        }
    };
    assert_eq!(in_image(&["--version"]), want_version);
    let before = std::fs::read_dir(rootfs.join("trainforge-artifacts"))
        .unwrap()
        .count();
    let out = in_image(&[
        "plugin",
        "precompile",
        "--out",
        "/trainforge-artifacts",
        "--progress",
        "none",
    ]);
    assert_eq!(
        out.lines()
            .filter(|l| l.contains(": already there in "))
            .count(),
        trainforge::plugin::builtin::all().len(),
        "{out}"
    );
    assert_eq!(
        std::fs::read_dir(rootfs.join("trainforge-artifacts"))
            .unwrap()
            .count(),
        before,
        "nothing compiled"
    );
}
