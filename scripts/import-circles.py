#!/usr/bin/env python3
"""Import circles between source files: two files that import each other,
directly or through others. Prints each circle (and its edges) and the count.

usage: scripts/import-circles.py REPO SRC_ROOT...   (e.g. . host/gateway/src)

An import is a `use` or a `crate::`/`super::`/`self::` path outside the
file's `#[cfg(test)]` module, attributed to the file that defines the item
(re-exports followed); declaring a child module is not an import. A reader
of paths, not a compiler: macros and glob imports are read as text."""
import os, re, sys
from collections import defaultdict

repo = sys.argv[1] if len(sys.argv) > 1 else '.'
roots = sys.argv[2:] or []

def crate_files(src):
    files = {}
    for d, _, fs in os.walk(os.path.join(repo, src)):
        for f in fs:
            if f.endswith('.rs'):
                files[os.path.relpath(os.path.join(d, f), repo)] = None
    return files

def strip_comments(text):
    text = re.sub(r'//[^\n]*', '', text)
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return text

class Crate:
    def __init__(self, src):
        self.src = src
        self.mods = {}   # module path tuple -> file
        self.text = {}
        root = os.path.join(src, 'lib.rs') if os.path.exists(os.path.join(repo, src, 'lib.rs')) else os.path.join(src, 'main.rs')
        self.walk((), root)
        # main.rs alongside lib.rs: its own crate, skip
    def walk(self, path, file):
        self.mods[path] = file
        raw = open(os.path.join(repo, file)).read()
        text = strip_comments(raw)
        self.text[file] = text
        base = os.path.dirname(file)
        name = os.path.basename(file)
        if name not in ('lib.rs', 'main.rs', 'mod.rs'):
            base = os.path.join(base, name[:-3])
        # inline test modules `mod tests { ... }` are part of the file
        for m in re.finditer(r'^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_0-9]+)\s*;', text, re.M):
            child = m.group(1)
            pre = text[:m.start()]
            pm = re.search(r'#\[path\s*=\s*""\]\s*$', pre)
            cand = [os.path.join(base, child + '.rs'), os.path.join(base, child, 'mod.rs')]
            for c in cand:
                if os.path.exists(os.path.join(repo, c)):
                    self.walk(path + (child,), c)
                    break
    def reexports(self, file):
        out = {}
        for m in re.finditer(r'pub(?:\([^)]*\))?\s+use\s+([^;]+);', self.text[file]):
            for full, alias in expand_use(m.group(1)):
                out[alias] = full
        return out

def expand_use(tree, prefix=''):
    tree = tree.strip()
    res = []
    m = re.match(r'^(.*?)::\{(.*)\}$', tree, re.S)
    if m or tree.startswith('{'):
        head = m.group(1) if m else ''
        body = m.group(2) if m else tree[1:-1]
        items, depth, cur = [], 0, ''
        for ch in body:
            if ch == '{': depth += 1
            if ch == '}': depth -= 1
            if ch == ',' and depth == 0:
                items.append(cur); cur = ''
            else: cur += ch
        items.append(cur)
        for it in items:
            if it.strip():
                res += expand_use(it, (prefix + '::' if prefix else '') + head if head else prefix)
        return res
    am = re.match(r'^(.*?)\s+as\s+([A-Za-z_0-9]+)$', tree, re.S)
    path, alias = (am.group(1), am.group(2)) if am else (tree, None)
    path = re.sub(r'\s+', '', path)
    full = (prefix + '::' + path) if prefix else path
    if full.endswith('::self'):
        full = full[:-6]
    last = full.split('::')[-1]
    res.append((full, alias or last))
    return res

def resolve(crate, modpath, segs, depth=0):
    """segs: absolute segment list within the crate; returns defining file."""
    if depth > 20: return None
    cur = ()
    i = 0
    while i < len(segs) and cur + (segs[i],) in crate.mods:
        cur = cur + (segs[i],); i += 1
    file = crate.mods[cur]
    if i == len(segs):
        return file
    name = segs[i]
    rex = crate.reexports(file)
    if name in rex:
        target = rex[name]
        abs_ = absolutize(crate, cur, target.split('::'))
        if abs_ is None: return file
        return resolve(crate, cur, abs_ + segs[i+1:], depth + 1)
    return file

def absolutize(crate, modpath, segs):
    segs = [s for s in segs if s]
    if not segs: return None
    if segs[0] == 'crate': return segs[1:]
    if segs[0] == 'self': return list(modpath) + segs[1:]
    if segs[0] == 'super':
        mp = list(modpath)
        while segs and segs[0] == 'super':
            mp = mp[:-1]; segs = segs[1:]
        return mp + segs
    # a child module of the current module referenced by name
    if tuple(modpath) + (segs[0],) in crate.mods:
        return list(modpath) + segs
    return None  # external

def graph(crate):
    edges = defaultdict(set)
    for modpath, file in crate.mods.items():
        text = crate.text[file]
        # drop #[cfg(test)] mod tests { ... } blocks: tests may import anything of their file's parent
        t = re.sub(r'#\[cfg\(test\)\]\s*(pub(?:\([^)]*\))?\s+)?mod\s+[a-z_]+\s*\{', 'TESTSTART{', text)
        if 'TESTSTART{' in t:
            t = t[:t.index('TESTSTART{')]
        paths = []
        for m in re.finditer(r'\buse\s+([^;]+);', t):
            paths += [full for full, _ in expand_use(m.group(1))]
        for m in re.finditer(r'\b((?:crate|super|self)(?:::[A-Za-z_0-9]+)+)', t):
            paths.append(m.group(1))
        inline = set(re.findall(r'\bmod\s+([a-z_0-9]+)\s*\{', t))
        for p in paths:
            segs = p.split('::')
            # `super::x` naming a module written inline in this file (bindgen's worlds)
            if len(segs) > 1 and segs[0] == 'super' and segs[1] in inline:
                continue
            abs_ = absolutize(crate, modpath, segs)
            if abs_ is None: continue
            target = resolve(crate, modpath, abs_)
            if target and target != file:
                edges[file].add(target)
    return edges

def sccs(nodes, edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)
    def strong(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in nodes:
        if v not in index: strong(v)
    return out

total = 0
for src in roots:
    c = Crate(src)
    e = graph(c)
    comps = sccs(list(c.mods.values()), e)
    for comp in comps:
        total += 1
        print(f'circle ({len(comp)} files):', ' '.join(comp))
        if True:
            cs = set(comp)
            for a in comp:
                for b in sorted(e.get(a, ())):
                    if b in cs:
                        print(f'    {a} -> {b}')
print('circles:', total)
