//! The floors of `host/src`, read from the source: which file imports which,
//! and whether any import runs upward or closes a cycle.
//!
//! An import is any path that names an item of this crate: a `use` item, or
//! a path in code (`crate::…`, `super::…`, `self::…`, also inside macro
//! calls). Each is resolved to the file that defines the item, through the
//! re-exports of `mod.rs` files (`pub use …` in a `mod.rs` or `lib.rs` is a
//! facade, not a dependency of that file).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// A file of the crate and the module path it defines (`plugin/load.rs` →
/// `["plugin", "load"]`; `plugin/mod.rs` → `["plugin"]`; `lib.rs` → `[]`).
struct SourceFile {
    rel: String,
    module: Vec<String>,
    ast: syn::File,
    /// Declared `#[cfg(test)] mod …;` by its parent.
    test_only: bool,
}

/// The crate read from disk: every file, by module path.
pub struct Crate {
    files: Vec<SourceFile>,
    by_module: BTreeMap<Vec<String>, usize>,
    /// Per file module: re-exported name → absolute target path.
    exports: Vec<BTreeMap<String, Vec<String>>>,
    /// Per file module: glob re-export targets.
    globs: Vec<Vec<Vec<String>>>,
}

/// Why the crate could not be read.
#[derive(Debug)]
#[allow(dead_code)] // read through Debug/Display in panics
pub enum ReadError {
    /// A file could not be read.
    Io(PathBuf, std::io::Error),
    /// A file is not valid Rust.
    Parse(PathBuf, syn::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(p, e) => write!(f, "{}: {e}", p.display()),
            Self::Parse(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ReadError> {
    let entries = std::fs::read_dir(dir).map_err(|e| ReadError::Io(dir.to_owned(), e))?;
    for entry in entries {
        let path = entry.map_err(|e| ReadError::Io(dir.to_owned(), e))?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

impl Crate {
    /// Read every `.rs` file under `src` except `main.rs` (the binary, a
    /// crate of its own).
    pub fn read(src: &Path) -> Result<Self, ReadError> {
        let mut paths = Vec::new();
        rust_files(src, &mut paths)?;
        paths.sort();
        let mut files = Vec::new();
        for path in paths {
            let rel = path
                .strip_prefix(src)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            if rel == "main.rs" {
                continue;
            }
            let text =
                std::fs::read_to_string(&path).map_err(|e| ReadError::Io(path.clone(), e))?;
            let ast = syn::parse_file(&text).map_err(|e| ReadError::Parse(path.clone(), e))?;
            let mut module: Vec<String> = rel
                .trim_end_matches(".rs")
                .split('/')
                .map(str::to_owned)
                .collect();
            if module.last().is_some_and(|m| m == "mod" || m == "lib") {
                module.pop();
            }
            files.push(SourceFile {
                rel,
                module,
                ast,
                test_only: false,
            });
        }
        let by_module = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.module.clone(), i))
            .collect();
        // Files their parent declares under `#[cfg(test)]`.
        let mut test_modules = BTreeSet::new();
        for f in &files {
            for item in &f.ast.items {
                if let syn::Item::Mod(m) = item
                    && m.content.is_none()
                    && is_cfg_test(&m.attrs)
                {
                    let mut child = f.module.clone();
                    child.push(m.ident.to_string());
                    test_modules.insert(child);
                }
            }
        }
        for f in &mut files {
            f.test_only = test_modules.iter().any(|m| f.module.starts_with(m));
        }
        let mut krate = Self {
            files,
            by_module,
            exports: Vec::new(),
            globs: Vec::new(),
        };
        for i in 0..krate.files.len() {
            let (named, globs) = krate.reexports(i);
            krate.exports.push(named);
            krate.globs.push(globs);
        }
        Ok(krate)
    }

    /// The `pub use` items at the top of file `i` (any `pub` visibility).
    fn reexports(&self, i: usize) -> (BTreeMap<String, Vec<String>>, Vec<Vec<String>>) {
        let file = &self.files[i];
        let mut named = BTreeMap::new();
        let mut globs = Vec::new();
        for item in &file.ast.items {
            let syn::Item::Use(u) = item else { continue };
            if matches!(u.vis, syn::Visibility::Inherited) {
                continue;
            }
            let mut leaves = Vec::new();
            flatten_use(&u.tree, &mut Vec::new(), &mut leaves);
            for (path, alias) in leaves {
                let Some(abs) = absolute(&self.by_module, &file.module, &[], &path) else {
                    continue;
                };
                match alias {
                    Leaf::Glob => globs.push(abs),
                    Leaf::Name(name) => {
                        named.insert(name, abs);
                    }
                }
            }
        }
        (named, globs)
    }

    /// The files read, as paths under `src`.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.files.iter().map(|f| f.rel.as_str())
    }

    /// The file that defines what the absolute path `path` names.
    fn resolve(&self, path: &[String], depth: usize) -> Option<usize> {
        if depth > 16 {
            return None;
        }
        let mut at = *self.by_module.get(&Vec::new())?;
        let mut module: Vec<String> = Vec::new();
        for (k, seg) in path.iter().enumerate() {
            let mut child = module.clone();
            child.push(seg.clone());
            if let Some(&f) = self.by_module.get(&child) {
                at = f;
                module = child;
                continue;
            }
            if let Some(target) = self.exports[at].get(seg) {
                let mut full = target.clone();
                full.extend(path[k + 1..].iter().cloned());
                return self.resolve(&full, depth + 1).or(Some(at));
            }
            for glob in &self.globs[at] {
                let mut full = glob.clone();
                full.extend(path[k..].iter().cloned());
                if let Some(f) = self.resolve(&full, depth + 1)
                    && f != at
                {
                    return Some(f);
                }
            }
            return Some(at);
        }
        Some(at)
    }

    /// Every import of the crate as (from file, to file, the path as written).
    pub fn imports(&self) -> Vec<Import> {
        let mut out = Vec::new();
        for (i, file) in self.files.iter().enumerate() {
            let facade = file.rel.ends_with("mod.rs") || file.rel == "lib.rs";
            let mut v = Paths {
                modules: &self.by_module,
                module: &file.module,
                inline: Vec::new(),
                tests: usize::from(file.test_only),
                facade,
                found: Vec::new(),
            };
            v.visit_file(&file.ast);
            // One import per target: the production one if there is one.
            let mut seen: BTreeMap<usize, usize> = BTreeMap::new();
            for (abs, written, test) in v.found {
                let Some(to) = self.resolve(&abs, 0) else {
                    continue;
                };
                if to == i {
                    continue;
                }
                match seen.get(&to) {
                    Some(&k) if out_test(&out, k) && !test => {
                        out[k] = Import {
                            from: file.rel.clone(),
                            to: self.files[to].rel.clone(),
                            written,
                            test,
                        };
                    }
                    Some(_) => {}
                    None => {
                        seen.insert(to, out.len());
                        out.push(Import {
                            from: file.rel.clone(),
                            to: self.files[to].rel.clone(),
                            written,
                            test,
                        });
                    }
                }
            }
        }
        out
    }
}

/// One file importing another.
#[derive(Debug, Clone)]
pub struct Import {
    /// The importing file, relative to `src`.
    pub from: String,
    /// The file that defines what it imports.
    pub to: String,
    /// The first path that makes the import, as written.
    pub written: String,
    /// Only test code imports it (`#[cfg(test)]`).
    pub test: bool,
}

fn out_test(out: &[Import], k: usize) -> bool {
    out.get(k).is_some_and(|i| i.test)
}

/// Whether attributes include `#[cfg(test)]`.
fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

enum Leaf {
    Name(String),
    Glob,
}

fn flatten_use(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Leaf)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut path = prefix.clone();
            let name = n.ident.to_string();
            if name == "self" {
                let last = path.last().cloned().unwrap_or_default();
                out.push((path, Leaf::Name(last)));
            } else {
                path.push(name.clone());
                out.push((path, Leaf::Name(name)));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            let name = r.ident.to_string();
            if name != "self" {
                path.push(name);
            }
            out.push((path, Leaf::Name(r.rename.to_string())));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), Leaf::Glob)),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix, out);
            }
        }
    }
}

/// `path` as an absolute module path, from a file module plus the inline
/// modules around the path; `None` for paths outside this crate (other
/// crates, local names). A path starting with the name of a child module of
/// a file module is relative to it (`use metrics::Metrics;` in `ops/mod.rs`).
fn absolute(
    modules: &BTreeMap<Vec<String>, usize>,
    file_module: &[String],
    inline: &[String],
    path: &[String],
) -> Option<Vec<String>> {
    let mut here: Vec<String> = file_module.iter().chain(inline).cloned().collect();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            here.clear();
            rest = &rest[1..];
        }
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                here.pop()?;
                rest = &rest[1..];
            }
        }
        Some("self") => rest = &rest[1..],
        Some(first) if inline.is_empty() => {
            let mut child = file_module.to_vec();
            child.push(first.to_owned());
            if !modules.contains_key(&child) {
                return None;
            }
        }
        _ => return None,
    }
    here.extend(rest.iter().cloned());
    Some(here)
}

struct Paths<'a> {
    modules: &'a BTreeMap<Vec<String>, usize>,
    module: &'a [String],
    inline: Vec<String>,
    /// How many `#[cfg(test)]` scopes enclose the visitor (0: production).
    tests: usize,
    facade: bool,
    found: Vec<(Vec<String>, String, bool)>,
}

impl Paths<'_> {
    fn push(&mut self, path: Vec<String>) {
        if let Some(abs) = absolute(self.modules, self.module, &self.inline, &path) {
            self.found.push((abs, path.join("::"), self.tests > 0));
        }
    }

    /// `crate :: a :: b` sequences in a macro's tokens.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut k = 0;
        while k < trees.len() {
            match &trees[k] {
                TokenTree::Group(g) => self.scan_tokens(g.stream()),
                TokenTree::Ident(id) if id == "crate" || id == "super" => {
                    let mut path = vec![id.to_string()];
                    let mut j = k + 1;
                    loop {
                        let colons = matches!((trees.get(j), trees.get(j + 1)),
                            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':');
                        match (colons, trees.get(j + 2)) {
                            (true, Some(TokenTree::Ident(next))) => {
                                path.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    if path.len() > 1 {
                        self.push(path);
                    }
                    k = j;
                    continue;
                }
                _ => {}
            }
            k += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if self.facade && self.inline.is_empty() && !matches!(u.vis, syn::Visibility::Inherited) {
            return;
        }
        let test = is_cfg_test(&u.attrs);
        self.tests += usize::from(test);
        let mut leaves = Vec::new();
        flatten_use(&u.tree, &mut Vec::new(), &mut leaves);
        for (path, _) in leaves {
            self.push(path);
        }
        self.tests -= usize::from(test);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            let test = is_cfg_test(&m.attrs);
            self.tests += usize::from(test);
            self.inline.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.inline.pop();
            self.tests -= usize::from(test);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        let test = is_cfg_test(&f.attrs);
        self.tests += usize::from(test);
        syn::visit::visit_item_fn(self, f);
        self.tests -= usize::from(test);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if segs.len() > 1 {
            self.push(segs);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.scan_tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// The floors, top (highest number) to bottom, by file path prefix under
/// `src`. A file may import its own floor and the floors below it.
pub const FLOORS: &[(u8, &str, &[&str])] = &[
    (6, "commands", &["cmd/", "lib.rs"]),
    (
        5,
        "admission and controllers",
        &["admission/", "controller/", "statusserver/"],
    ),
    (4, "the pure pipeline and OCI", &["pipeline/", "oci/"]),
    (3, "shared operations", &["ops/"]),
    (2, "the plugin runtime", &["plugin/"]),
];

/// The floor of a file, by its path under `src`.
pub fn floor(rel: &str) -> Option<(u8, &'static str)> {
    FLOORS.iter().find_map(|(n, name, prefixes)| {
        prefixes
            .iter()
            .any(|p| rel == *p || rel.starts_with(p))
            .then_some((*n, *name))
    })
}

/// The module (directory) a file belongs to: `controller/trainjob/apply.rs`
/// → `controller/trainjob`; `ops/mod.rs` → `ops`; `lib.rs` → ``.
pub fn unit(rel: &str) -> &str {
    rel.rfind('/').map_or("", |k| &rel[..k])
}

/// Strongly connected components of more than one node.
pub fn cycles(edges: &[(String, String)]) -> Vec<Vec<String>> {
    let mut nodes: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        nodes.entry(a).or_default().push(b);
        nodes.entry(b).or_default();
    }
    // Tarjan's algorithm; recursion is fine, the graph has a few hundred nodes.
    struct T<'a> {
        g: &'a BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    impl<'a> T<'a> {
        fn visit(&mut self, v: &'a str) {
            self.index.insert(v, self.next);
            self.low.insert(v, self.next);
            self.next += 1;
            self.stack.push(v);
            self.on.insert(v);
            for &w in self.g.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    if let Some(l) = self.low.get_mut(v) {
                        *l = (*l).min(lw);
                    }
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    if let Some(l) = self.low.get_mut(v) {
                        *l = (*l).min(iw);
                    }
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    scc.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = T {
        g: &nodes,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for &v in nodes.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

/// Describe a cycle by the imports that close it.
pub fn describe_cycle(members: &[String], imports: &[(String, String, String)]) -> String {
    let set: BTreeSet<&String> = members.iter().collect();
    let mut s = String::new();
    for (a, b, written) in imports {
        if set.contains(a) && set.contains(b) {
            let _ = writeln!(s, "    {a} → {b} ({written})");
        }
    }
    s
}
