//! The layering of the two library crates, checked: module imports form a
//! DAG (no module imports one that imports it back), as
//! `docs/ARCHITECTURE.md` draws them. Reads the sources as text: every
//! `crate::` path and every `super::` path of a child module names a
//! module it depends on. Test modules (`#[cfg(test)] mod tests`) are left
//! out: they may use anything.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// Module name (`remote::link`) → the modules of the same crate it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `remote/mod.rs` → `remote`, `remote/link.rs` → `remote::link`.
fn module_name(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let parts: Vec<_> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let parts: Vec<_> = match parts.as_slice() {
        [only] if only == "lib" || only == "main" => return None,
        [rest @ .., last] if last == "mod" => rest.to_vec(),
        all => all.to_vec(),
    };
    Some(parts.join("::"))
}

/// The first identifiers of each top-level item of a `{ ... }` use group
/// starting right after `open` (the index of `{`).
fn group_heads(text: &str, open: usize) -> Vec<String> {
    let mut heads = Vec::new();
    let (mut depth, mut item) = (0, String::new());
    for ch in text[open..].chars() {
        match ch {
            '{' => {
                depth += 1;
                if depth > 1 {
                    item.push(ch);
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    heads.push(std::mem::take(&mut item));
                    break;
                }
                item.push(ch);
            }
            ',' if depth == 1 => heads.push(std::mem::take(&mut item)),
            _ => item.push(ch),
        }
    }
    heads
        .iter()
        .filter_map(|h| {
            let h = h.trim();
            let end = h
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(h.len());
            (end > 0).then(|| h[..end].to_owned())
        })
        .collect()
}

/// Identifiers that follow `prefix` in `text` (`crate::` → `remote`), and
/// the heads of `prefix{ ... }` groups.
fn names_after(text: &str, prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in text.match_indices(prefix) {
        let rest = &text[at + prefix.len()..];
        if rest.starts_with('{') {
            names.extend(group_heads(text, at + prefix.len()));
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end > 0 {
            names.push(rest[..end].to_owned());
        }
    }
    names
}

fn graph(crate_dir: &str) -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let sources: BTreeMap<String, String> = files
        .iter()
        .filter_map(|f| {
            let name = module_name(&src, f)?;
            let mut text = fs::read_to_string(f).expect("readable source");
            if let Some(at) = text.find("#[cfg(test)]\nmod tests") {
                text.truncate(at);
            }
            Some((name, text))
        })
        .collect();
    let known: BTreeSet<&String> = sources.keys().collect();
    let mut graph = Graph::new();
    for (name, text) in &sources {
        let parent = name.rsplit_once("::").map(|(p, _)| p.to_owned());
        let mut deps = BTreeSet::new();
        for dep in names_after(text, "crate::") {
            deps.insert(dep);
        }
        if let Some(parent) = &parent {
            for dep in names_after(text, "super::") {
                deps.insert(format!("{parent}::{dep}"));
            }
        }
        let deps = deps
            .into_iter()
            .filter(|d| d != name && known.contains(d))
            // A module's own ancestors hold it; naming them is structure.
            .filter(|d| !name.starts_with(&format!("{d}::")))
            .collect();
        graph.insert(name.clone(), deps);
    }
    graph
}

/// A cycle through the graph, if there is one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        graph: &Graph,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(graph, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(graph, n, &mut Vec::new(), &mut done))
}

#[test]
fn the_checker_finds_a_cycle() {
    let mut g = Graph::new();
    g.insert("a".into(), ["b".into()].into());
    g.insert("b".into(), ["c".into()].into());
    g.insert("c".into(), ["a".into()].into());
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    g.insert("c".into(), BTreeSet::new());
    assert_eq!(find_cycle(&g), None);
    assert_eq!(
        group_heads("use crate::{a::{b, c}, d, e::F};", 11),
        ["a", "d", "e"]
    );
}

#[test]
fn actors_modules_import_one_way() {
    let g = graph("actors");
    // Sanity: the parse sees the layers it should.
    assert!(g["actor_ref"].contains("remote"), "{g:#?}");
    assert!(
        g["remote::outbound"].contains("remote::association"),
        "{g:#?}"
    );
    assert_eq!(find_cycle(&g), None, "{g:#?}");
}

#[test]
fn transport_modules_import_one_way() {
    let g = graph("transport");
    assert!(g["conn"].contains("writer"), "{g:#?}");
    assert_eq!(find_cycle(&g), None, "{g:#?}");
}

/// The modules a crate's `# Layout` section lists, in its order: each
/// entry starts with the module's name in backticks (or as a link) and a
/// colon (`` `error`: ``, `` [`router`]: ``, `` `tls` (feature `tls`): ``).
fn layout_order(crate_dir: &str) -> Vec<String> {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("src/lib.rs");
    let text = fs::read_to_string(lib).expect("readable lib.rs");
    let docs: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(str::trim)
        .collect();
    let start = docs
        .iter()
        .position(|l| *l == "# Layout")
        .expect("a # Layout section");
    let section = docs[start + 1..]
        .iter()
        .take_while(|l| !l.starts_with('#'))
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let mut order = Vec::new();
    for (at, _) in section.match_indices('`') {
        let rest = &section[at + 1..];
        let Some(end) = rest.find('`') else { break };
        let name = &rest[..end];
        let mut after = rest[end + 1..].trim_start_matches(']');
        // `tls` (feature `tls`): a feature-gated module.
        if let Some(gated) = after.strip_prefix(" (feature ") {
            after = gated.split_once(')').map_or("", |(_, a)| a);
        }
        if after.starts_with(':')
            && !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !order.iter().any(|n| n == name)
        {
            order.push(name.to_owned());
        }
    }
    order
}

/// Checks the Layout list against the imports: every module is listed,
/// and each imports only modules listed before it.
fn check_layout(crate_dir: &str, test_only: &[&str]) -> Result<(), String> {
    let g = graph(crate_dir);
    let order = layout_order(crate_dir);
    // A top-level module with its submodules is one entry of the list.
    let mut top: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (m, deps) in &g {
        let head = m.split("::").next().unwrap_or(m);
        if test_only.contains(&head) {
            continue;
        }
        let entry = top.entry(head).or_default();
        for d in deps {
            let d = d.split("::").next().unwrap_or(d);
            if d != head {
                entry.insert(d);
            }
        }
    }
    let mut problems = Vec::new();
    for m in top.keys() {
        if !order.iter().any(|o| o == m) {
            problems.push(format!("`{m}` is not in the Layout list"));
        }
    }
    for (i, m) in order.iter().enumerate() {
        let Some(deps) = top.get(m.as_str()) else {
            problems.push(format!("the Layout list names `{m}`, which is no module"));
            continue;
        };
        for d in deps {
            if !order[..i].iter().any(|o| o == d) {
                problems.push(format!("`{m}` imports `{d}`, listed after it"));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{crate_dir}: {}; order {order:?}",
            problems.join("; ")
        ))
    }
}

#[test]
fn the_crate_docs_list_the_modules_in_import_order() {
    check_layout("actors", &["differential"]).unwrap();
    check_layout("transport", &[]).unwrap();
}
