//! The layering of the two library crates, checked: module imports form a
//! DAG (no module imports one that imports it back), and every import is
//! an edge that `docs/ARCHITECTURE.md` allows (its `edges <crate>`
//! blocks), no more and no fewer. Reads the sources as text: every
//! `crate::` path (the deepest module it goes through, use groups
//! expanded) and every `super::` path of a child module names a module it
//! depends on. Test modules (`#[cfg(test)] mod tests`) are left
//! out: they may use anything.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// Module name (`remote::link`) → the modules of the same crate it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Where an edge of the graph is in the code: the importing file (from
/// the crate's folder) and the line of its first mention of the module.
type Where = BTreeMap<(String, String), (String, usize)>;

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
/// the heads of `prefix{ ... }` groups, each with the line it is on.
fn names_after(text: &str, prefix: &str) -> Vec<(String, usize)> {
    let mut names = Vec::new();
    for (at, _) in text.match_indices(prefix) {
        let line = text[..at].lines().count().max(1);
        let rest = &text[at + prefix.len()..];
        if rest.starts_with('{') {
            names.extend(
                group_heads(text, at + prefix.len())
                    .into_iter()
                    .map(|n| (n, line)),
            );
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end > 0 {
            names.push((rest[..end].to_owned(), line));
        }
    }
    names
}

/// The paths that follow `prefix` in `text`, `{ ... }` groups expanded
/// (`crate::remote::{flow::Windowed, link}` → `remote::flow::Windowed`,
/// `remote::link`), each with the line it is on.
fn paths_after(text: &str, prefix: &str) -> Vec<(String, usize)> {
    let mut paths = Vec::new();
    for (at, _) in text.match_indices(prefix) {
        let line = text[..at].lines().count().max(1);
        paths.extend(
            expand(&text[at + prefix.len()..])
                .into_iter()
                .map(|p| (p, line)),
        );
    }
    paths
}

/// The paths `rest` starts with: a path (`a::b::C`), or a path that ends
/// in a group (`a::{b::C, d::{E, F}}`), expanded.
fn expand(rest: &str) -> Vec<String> {
    let mut path = String::new();
    let mut s = rest;
    loop {
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        if end == 0 {
            if !s.starts_with('{') {
                return Vec::new();
            }
            return group_items(s)
                .into_iter()
                .flat_map(|item| expand(item.trim()))
                .map(|p| format!("{path}{p}"))
                .collect();
        }
        path.push_str(&s[..end]);
        s = &s[end..];
        match s.strip_prefix("::") {
            Some(more) => {
                path.push_str("::");
                s = more;
            }
            None => return vec![path],
        }
    }
}

/// The top-level items of the `{ ... }` group `s` starts with.
fn group_items(s: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 1);
    for (i, ch) in s.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    items.push(&s[start..i]);
                    break;
                }
            }
            ',' if depth == 1 => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

/// The module a path names: its longest prefix that is a module
/// (`remote::flow::Windowed` → `remote::flow`).
fn module_of(path: &str, known: &BTreeSet<&String>) -> Option<String> {
    let segments: Vec<&str> = path.split("::").collect();
    (1..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|m| known.contains(m))
}

fn graph(crate_dir: &str) -> Graph {
    graph_where(crate_dir).0
}

/// The crate's module graph, and where each edge is in the code.
fn graph_where(crate_dir: &str) -> (Graph, Where) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let sources: BTreeMap<String, (String, String)> = files
        .iter()
        .filter_map(|f| {
            let name = module_name(&src, f)?;
            // A test module in its own file (`#[cfg(test)] mod tests;`)
            // is left out like one written inline.
            if name.ends_with("::tests") {
                return None;
            }
            let mut text = fs::read_to_string(f).expect("readable source");
            if let Some(at) = text.find("#[cfg(test)]\nmod tests") {
                text.truncate(at);
            }
            let file = format!(
                "{crate_dir}/src/{}",
                f.strip_prefix(&src).expect("under src").display()
            );
            Some((name, (file, text)))
        })
        .collect();
    let known: BTreeSet<&String> = sources.keys().collect();
    let mut graph = Graph::new();
    let mut at = Where::new();
    for (name, (file, text)) in &sources {
        let parent = name.rsplit_once("::").map(|(p, _)| p.to_owned());
        // A `crate::` path names the deepest module it goes through, so
        // that a nested module's imports of its parent's siblings are edges.
        let mut deps: Vec<(String, usize)> = paths_after(text, "crate::")
            .into_iter()
            .filter_map(|(p, line)| Some((module_of(&p, &known)?, line)))
            .collect();
        if let Some(parent) = &parent {
            for (dep, line) in names_after(text, "super::") {
                deps.push((format!("{parent}::{dep}"), line));
            }
        }
        let mut kept = BTreeSet::new();
        for (d, line) in deps {
            // A module's own ancestors hold it, and it holds its
            // descendants; naming them is structure.
            if d == *name
                || !known.contains(&d)
                || name.starts_with(&format!("{d}::"))
                || d.starts_with(&format!("{name}::"))
            {
                continue;
            }
            let first = at
                .entry((name.clone(), d.clone()))
                .or_insert((file.clone(), line));
            first.1 = first.1.min(line);
            kept.insert(d);
        }
        graph.insert(name.clone(), kept);
    }
    (graph, at)
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

/// `docs/ARCHITECTURE.md`, where the map is.
fn architecture() -> String {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ARCHITECTURE.md");
    fs::read_to_string(doc).expect("readable docs/ARCHITECTURE.md")
}

/// The edges a map allows for `krate`: the lines of its ```` ```edges
/// <krate> ```` block in `doc`, `module -> dep, dep, ...` (a module that
/// imports nothing: `module ->`). A line that starts with blanks goes on
/// with the list above it; `#` starts a comment.
fn map_edges(doc: &str, krate: &str) -> Result<Graph, String> {
    let fence = format!("```edges {krate}");
    let start = doc
        .lines()
        .position(|l| l.trim() == fence)
        .ok_or_else(|| format!("docs/ARCHITECTURE.md has no block opening with {fence}"))?;
    let mut map = Graph::new();
    let mut current: Option<String> = None;
    for (i, raw) in doc.lines().enumerate().skip(start + 1) {
        if raw.trim_start().starts_with("```") {
            return Ok(map);
        }
        let line = raw.split('#').next().unwrap_or_default();
        if line.trim().is_empty() {
            continue;
        }
        let list = if line.starts_with(char::is_whitespace) {
            current
                .as_ref()
                .ok_or_else(|| format!("line {}: a continuation with no module", i + 1))?;
            line
        } else {
            let (module, list) = line
                .split_once("->")
                .ok_or_else(|| format!("line {}: `module -> deps` expected: {raw}", i + 1))?;
            let module = module.trim().to_owned();
            map.entry(module.clone()).or_default();
            current = Some(module);
            list
        };
        let module = current.as_ref().expect("set above");
        for dep in list.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            map.get_mut(module)
                .expect("entered above")
                .insert(dep.to_owned());
        }
    }
    Err(format!("the `{fence}` block is not closed"))
}

/// What differs between the code's edges and the map's: an edge in the
/// code the map does not allow (named with its file and line), a module
/// the map does not list, and what the map lists that the code does not
/// have (so the map shows the layers as they are). Modules whose first
/// segment is in `skip` (test-only modules) are left out.
fn compare(code: &Graph, at: &Where, map: &Graph, skip: &[&str]) -> Vec<String> {
    let skipped = |m: &str| skip.contains(&m.split("::").next().unwrap_or(m));
    let mut problems = Vec::new();
    for (m, deps) in code.iter().filter(|(m, _)| !skipped(m)) {
        let Some(allowed) = map.get(m) else {
            problems.push(format!("module `{m}` has no line in the map"));
            continue;
        };
        for d in deps.iter().filter(|d| !allowed.contains(*d)) {
            let (file, line) = &at[&(m.clone(), d.clone())];
            problems.push(format!(
                "`{m} -> {d}` ({file}:{line}) is an edge the map does not allow"
            ));
        }
    }
    for (m, allowed) in map {
        let Some(deps) = code.get(m) else {
            problems.push(format!("the map lists `{m}`, which is no module"));
            continue;
        };
        for d in allowed.iter().filter(|d| !deps.contains(*d)) {
            problems.push(format!(
                "the map allows `{m} -> {d}`, which the code does not have (remove it)"
            ));
        }
    }
    problems
}

/// `graph` as map lines, bottom up (a module after everything it
/// imports), wrapped at 78 columns: what the block should say.
fn render(graph: &Graph, skip: &[&str]) -> String {
    let mut done: BTreeSet<&str> = BTreeSet::new();
    let mut out = String::new();
    let mut left: Vec<&String> = graph
        .keys()
        .filter(|m| !skip.contains(&m.split("::").next().unwrap_or(m)))
        .collect();
    while !left.is_empty() {
        // The first (by name) whose imports are all placed; on a cycle,
        // the first left.
        let i = left
            .iter()
            .position(|m| {
                graph[*m]
                    .iter()
                    .all(|d| done.contains(d.as_str()) || skip.contains(&d.as_str()))
            })
            .unwrap_or(0);
        let m = left.remove(i);
        done.insert(m);
        let mut line = format!("{m} ->");
        let deps: Vec<&String> = graph[m].iter().collect();
        for (k, d) in deps.iter().enumerate() {
            let item = if k + 1 < deps.len() {
                format!(" {d},")
            } else {
                format!(" {d}")
            };
            if line.len() + item.len() > 78 {
                out.push_str(&line);
                out.push('\n');
                line = "   ".to_owned();
            }
            line.push_str(&item);
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Checks `krate`'s imports against its map in `docs/ARCHITECTURE.md`.
fn check_map(krate: &str, skip: &[&str]) -> Result<(), String> {
    let (code, at) = graph_where(krate);
    let problems = match map_edges(&architecture(), krate) {
        Ok(map) => compare(&code, &at, &map, skip),
        Err(e) => vec![e],
    };
    if problems.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{krate}: the module map in docs/ARCHITECTURE.md and the code differ:\n- {}\n\
         the code's edges, as the `edges {krate}` block would list them:\n{}",
        problems.join("\n- "),
        render(&code, skip)
    ))
}

#[test]
fn the_map_check_names_an_edge_the_map_does_not_allow() {
    let code: Graph = [
        ("a".to_owned(), ["b".to_owned()].into()),
        ("b".to_owned(), BTreeSet::new()),
    ]
    .into();
    let at: Where = [(("a".into(), "b".into()), ("x/src/a.rs".into(), 7))].into();
    let doc = "text\n```edges x\n# comment\nb ->\na -> b\n```\n";
    let map = map_edges(doc, "x").expect("a map");
    assert_eq!(compare(&code, &at, &map, &[]), Vec::<String>::new());
    // The map forgot the edge.
    let map = map_edges("```edges x\na ->\nb ->\n```", "x").expect("a map");
    assert_eq!(
        compare(&code, &at, &map, &[]),
        ["`a -> b` (x/src/a.rs:7) is an edge the map does not allow"]
    );
    // A module the map does not know, and an edge the code lost.
    let map = map_edges("```edges x\nb -> a\n```", "x").expect("a map");
    assert_eq!(
        compare(&code, &at, &map, &[]),
        [
            "module `a` has no line in the map",
            "the map allows `b -> a`, which the code does not have (remove it)"
        ]
    );
    // Continuation lines, and the rendering reads back as the same map.
    let wide: Graph = [("m".to_owned(), (0..30).map(|i| format!("dep{i}")).collect())].into();
    let text = format!("```edges w\n{}```", render(&wide, &[]));
    assert!(text.lines().all(|l| l.len() <= 78), "{text}");
    assert_eq!(map_edges(&text, "w").expect("a map")["m"], wide["m"]);
}

#[test]
fn actors_imports_are_edges_the_map_allows() {
    check_map("actors", &["differential"]).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn transport_imports_are_edges_the_map_allows() {
    check_map("transport", &[]).unwrap_or_else(|e| panic!("{e}"));
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
    let paths: Vec<String> = paths_after(
        "use crate::{a::{b::{self, C}, d as e}, f,\n};\nlet x = crate::g::h(1);",
        "crate::",
    )
    .into_iter()
    .map(|(p, _)| p)
    .collect();
    assert_eq!(paths, ["a::b::self", "a::b::C", "a::d", "f", "g::h"]);
    let (ab, a) = ("a::b".to_owned(), "a".to_owned());
    let known = BTreeSet::from([&ab, &a]);
    assert_eq!(module_of("a::b::C", &known).as_deref(), Some("a::b"));
    assert_eq!(module_of("a::C", &known).as_deref(), Some("a"));
    assert_eq!(module_of("Z", &known), None);
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
