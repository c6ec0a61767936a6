//! The house keeps its shape: `docs/architecture.md` names every source file
//! of every crate under `host/` and `providers/`, with a line on what it
//! owns, and names nothing that is gone; no two source files import each
//! other, directly or through others (`scripts/import-circles.py`); no
//! source file outside tests is longer than [`MAX_LINES`].
//!
//! The map's file trees are the fenced blocks marked `tree`: the first line
//! is a crate's source root (`host/gateway/src/`); each later line is
//! indented two spaces a level and starts with one or more names (`name.rs`
//! or `folder/`) followed by what they hold. A line that starts with no name
//! continues the line above it.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use pontoon_tests::repo_root;

const MAP: &str = "docs/architecture.md";

/// The longest a source file may be outside its tests (its `#[cfg(test)]`
/// module, or a file of tests): past this, a file holds more than one
/// concept.
const MAX_LINES: usize = 700;

/// Files still longer than [`MAX_LINES`], each at most as long as it is
/// now: a ratchet. Split one, and take it off the list; none may be added.
const NOT_YET_SPLIT: [(&str, usize); 0] = [];

/// A name as the map writes it: a file or a folder.
fn is_name(word: &str) -> bool {
    let stem = word
        .strip_suffix(".rs")
        .or_else(|| word.strip_suffix('/'))
        .unwrap_or_default();
    !stem.is_empty()
        && stem
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// What the map names: source roots, and every file with its description.
#[derive(Debug, Default)]
struct Map {
    roots: BTreeSet<PathBuf>,
    files: BTreeSet<PathBuf>,
    undescribed: Vec<String>,
}

fn read_map(text: &str) -> Map {
    let mut map = Map::default();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "```tree" {
            continue;
        }
        let Some(root) = lines.next().map(str::trim) else {
            break;
        };
        let root = PathBuf::from(root);
        map.roots.insert(root.clone());
        // The folder at each depth.
        let mut folders: Vec<PathBuf> = vec![root];
        for line in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            let indent = line.len() - line.trim_start().len();
            let depth = indent / 2;
            let words: Vec<&str> = line.split_whitespace().collect();
            let names: Vec<&str> = words.iter().copied().take_while(|w| is_name(w)).collect();
            if names.is_empty() || depth == 0 || depth > folders.len() {
                continue;
            }
            folders.truncate(depth);
            let parent = folders[depth - 1].clone();
            if names.len() == words.len() && names.iter().any(|n| n.ends_with(".rs")) {
                map.undescribed.push(line.trim().to_string());
            }
            for name in names {
                match name.strip_suffix('/') {
                    Some(folder) => folders.push(parent.join(folder)),
                    None => {
                        map.files.insert(parent.join(name));
                    }
                }
            }
        }
    }
    map
}

/// Every `.rs` file under `dir`, relative to the repository.
fn sources(repo: &Path, dir: &Path, into: &mut BTreeSet<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(repo.join(dir)) else {
        return;
    };
    for entry in entries.flatten() {
        let path = dir.join(entry.file_name());
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            sources(repo, &path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.insert(path);
        }
    }
}

/// The source roots of every crate under `host/`, `providers/` and
/// `dataplane/`.
fn crate_roots(repo: &Path) -> BTreeSet<PathBuf> {
    let mut roots = BTreeSet::new();
    let mut pending = vec![
        PathBuf::from("host"),
        PathBuf::from("providers"),
        PathBuf::from("dataplane"),
    ];
    while let Some(dir) = pending.pop() {
        if repo.join(&dir).join("Cargo.toml").is_file() {
            roots.insert(dir.join("src"));
        }
        let Ok(entries) = std::fs::read_dir(repo.join(&dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let skip = [
                "src",
                "tests",
                "examples",
                "target",
                "testdata",
                "templates",
            ];
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false)
                && !skip.contains(&name.as_ref())
                && !name.starts_with('.')
            {
                pending.push(dir.join(entry.file_name()));
            }
        }
    }
    roots
}

#[test]
fn the_map_names_every_source_file_and_nothing_else() {
    let repo = repo_root();
    let text = std::fs::read_to_string(repo.join(MAP)).expect("docs/architecture.md");
    let map = read_map(&text);

    let crates = crate_roots(&repo);
    let unmapped_crates: Vec<_> = crates.difference(&map.roots).collect();
    assert!(
        unmapped_crates.is_empty(),
        "{MAP} has no tree for these crates' sources: {unmapped_crates:?}"
    );

    let mut files = BTreeSet::new();
    for root in &map.roots {
        sources(&repo, root, &mut files);
    }
    let missing: Vec<_> = files.difference(&map.files).collect();
    assert!(
        missing.is_empty(),
        "{MAP} does not name these source files (add each with a line on what it owns): {missing:#?}"
    );
    let gone: Vec<_> = map.files.difference(&files).collect();
    assert!(
        gone.is_empty(),
        "{MAP} names files that do not exist: {gone:#?}"
    );
    assert!(
        map.undescribed.is_empty(),
        "{MAP} names files without saying what they own: {:#?}",
        map.undescribed
    );
}

#[test]
fn the_map_reader_follows_folders_by_indentation() {
    let map = read_map(
        "text\n```tree\nhost/x/src/\n  lib.rs   the crate\n  a/       folder a\n    b.rs c.rs   two files\n      continued words\n  d.rs\n```\n",
    );
    let files: Vec<_> = map.files.iter().map(|p| p.display().to_string()).collect();
    assert_eq!(
        files,
        [
            "host/x/src/a/b.rs",
            "host/x/src/a/c.rs",
            "host/x/src/d.rs",
            "host/x/src/lib.rs"
        ]
    );
    assert_eq!(map.undescribed, ["d.rs"]);
    assert_eq!(map.roots.len(), 1);
}

#[test]
fn no_source_file_imports_itself_through_others() {
    let repo = repo_root();
    let roots = crate_roots(&repo);
    let output = std::process::Command::new("python3")
        .arg(repo.join("scripts/import-circles.py"))
        .arg(&repo)
        .args(&roots)
        .output()
        .expect("python3 runs scripts/import-circles.py");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "scripts/import-circles.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        printed.trim_end().ends_with("circles: 0"),
        "files that import each other (move the shared vocabulary into a file of its own):\n{printed}"
    );
}

/// The lines of a source file before its test module (a top-level
/// `#[cfg(test)]` module written inline; `#[cfg(test)] mod fixtures;` is
/// not one).
fn code_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .iter()
        .zip(lines.iter().skip(1).chain(std::iter::once(&"")))
        .take_while(|(line, next)| {
            !(line.trim_end() == "#[cfg(test)]"
                && (next.starts_with("mod ") || next.starts_with("pub(crate) mod "))
                && next.trim_end().ends_with('{'))
        })
        .count()
}

#[test]
fn code_lines_stop_at_the_test_module() {
    assert_eq!(code_lines("a\nb\n#[cfg(test)]\nmod tests {\n}\n"), 2);
    assert_eq!(code_lines("#[cfg(test)]\nmod fixtures;\na\n"), 3);
    assert_eq!(
        code_lines("a\n    #[cfg(test)]\nb\n"),
        3,
        "only a module at the top level"
    );
    assert_eq!(code_lines("a\nb\n"), 2);
}

#[test]
fn no_source_file_is_longer_than_the_limit() {
    let repo = repo_root();
    let mut files = BTreeSet::new();
    for root in crate_roots(&repo) {
        sources(&repo, &root, &mut files);
    }
    let long: Vec<(PathBuf, usize)> = files
        .into_iter()
        .filter_map(|file| {
            let lines = code_lines(&std::fs::read_to_string(repo.join(&file)).ok()?);
            (lines > MAX_LINES).then_some((file, lines))
        })
        // Golden and property tests of config generation are tests, not code.
        .filter(|(file, _)| !file.ends_with("tests.rs"))
        .filter(|(file, lines)| {
            !NOT_YET_SPLIT
                .iter()
                .any(|(listed, most)| file == Path::new(listed) && lines <= most)
        })
        .collect();
    assert!(
        long.is_empty(),
        "source files longer than {MAX_LINES} lines (split them by concept), or longer than \
         NOT_YET_SPLIT allows: {long:#?}"
    );
}

/// The Gateway crate's layers, each with the layers it must not import:
/// the edge (watches, reconcilers, API I/O) over judgement (pure, over the
/// cluster view) over the data plane (pure output). A file of a lower layer
/// naming a higher one, tests included, is a layer turned upside down.
const GATEWAY_LAYERS: [(&str, &[&str]); 2] = [
    ("judgement", &["crate::edge"]),
    ("data_plane", &["crate::edge", "crate::judgement"]),
];

#[test]
fn the_gateway_layers_import_only_downwards() {
    let root = repo_root().join("host/gateway/src");
    let mut upside_down = Vec::new();
    for (layer, above) in GATEWAY_LAYERS {
        let mut files = BTreeSet::new();
        sources(&root, &root.join(layer), &mut files);
        files.insert(root.join(format!("{layer}.rs")));
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            // `crate::{edge::…}` names the layer too.
            let flat = text.replace(char::is_whitespace, "");
            for higher in above {
                let grouped = format!("crate::{{{}", higher.trim_start_matches("crate::"));
                let listed = format!(",{}::", higher.trim_start_matches("crate::"));
                if text.contains(&format!("{higher}::"))
                    || flat.contains(&grouped)
                    || (flat.contains("crate::{") && flat.contains(&listed))
                {
                    upside_down.push(format!("{} imports {higher}", file.display()));
                }
            }
        }
    }
    assert!(upside_down.is_empty(), "{upside_down:#?}");
}
