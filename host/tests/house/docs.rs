//! What the docs point at: every relative link of a Markdown file and every
//! repository path it names in inline code must exist.
//!
//! A path in inline code is one that starts with a top-level directory of
//! the repository (`host/src/…`, `docs/…`) or is a top-level file
//! (`Makefile`, `Cargo.toml`, …), and has no placeholder in it (a space,
//! `*`, `<`, `>`, `…`, `{`). A trailing `:LINE` is dropped. Code blocks are
//! not read: they show commands and output, not references.

use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, Parser, Tag};

/// Top-level directories whose paths are checked.
pub const TOP_DIRS: &[&str] = &[
    "host/",
    "api/",
    "sdk/",
    "plugins/",
    "wit/",
    "testenv/",
    "manifests/",
    "examples/",
    "crds/",
    "docs/",
    ".ci/",
];

/// Top-level files whose names are checked.
pub const TOP_FILES: &[&str] = &[
    "Makefile",
    "Cargo.toml",
    "README.md",
    "rust-toolchain.toml",
    "deny.toml",
    "Dockerfile",
];

/// One reference a document makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// A Markdown link or image target, relative to the document.
    Link(String),
    /// A repository path in inline code, relative to the repository root.
    Path(String),
}

/// The references `markdown` makes.
pub fn references(markdown: &str) -> Vec<Reference> {
    let mut out = Vec::new();
    for event in Parser::new(markdown) {
        match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                let url = dest_url.to_string();
                if let Some(target) = relative_target(&url) {
                    out.push(Reference::Link(target));
                }
            }
            Event::Code(code) => {
                if let Some(path) = repo_path(&code) {
                    out.push(Reference::Path(path));
                }
            }
            _ => {}
        }
    }
    out
}

/// A link's file part, if it is relative (no scheme, not an anchor only).
fn relative_target(url: &str) -> Option<String> {
    if url.contains("://") || url.starts_with("mailto:") || url.starts_with('#') {
        return None;
    }
    let file = url.split('#').next().unwrap_or_default();
    (!file.is_empty()).then(|| file.to_owned())
}

/// Inline code that names a repository path.
fn repo_path(code: &str) -> Option<String> {
    if code
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '*' | '<' | '>' | '…' | '{' | '$'))
    {
        return None;
    }
    let path = match code.rsplit_once(':') {
        Some((p, line)) if !line.is_empty() && line.chars().all(|c| c.is_ascii_digit()) => p,
        _ => code,
    };
    let named = TOP_DIRS.iter().any(|d| path.starts_with(d)) || TOP_FILES.contains(&path);
    named.then(|| path.to_owned())
}

/// The Markdown files the docs are made of: `README.md`, everything under
/// `docs/`, and the READMEs of top-level directories.
pub fn markdown_files(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = vec![root.join("README.md")];
    let mut stack = vec![root.join("docs")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    for dir in TOP_DIRS {
        let readme = root.join(dir).join("README.md");
        if readme.is_file() && !files.contains(&readme) {
            files.push(readme);
        }
    }
    files.sort();
    Ok(files)
}

/// The references of `file` that name nothing, as `file: reference`.
pub fn broken(root: &Path, file: &Path) -> std::io::Result<Vec<String>> {
    let text = std::fs::read_to_string(file)?;
    let dir = file.parent().unwrap_or(root);
    let shown = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    Ok(references(&text)
        .into_iter()
        .filter_map(|r| {
            let (target, what) = match &r {
                Reference::Link(l) => (dir.join(l), format!("link ({l})")),
                Reference::Path(p) => (root.join(p), format!("path `{p}`")),
            };
            (!target.exists()).then(|| format!("{shown}: {what} does not exist"))
        })
        .collect())
}
