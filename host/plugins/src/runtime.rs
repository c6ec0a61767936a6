//! The plugin runtime: one engine, one linker per world, compiled components
//! cached by content hash. Loading ends in a typed module of its world,
//! which runs its calls in the runtime's [`Sandbox`] (a fresh store for
//! every call) without needing the runtime again.

use std::{
    collections::HashMap,
    path::Path,
    sync::{Arc, Mutex},
};

use sha2::{Digest, Sha256};
use wasmtime::{
    Engine,
    component::{Component, HasSelf, Linker},
};

use super::{
    bindings::{
        BRIDGE_MOUNT_EXPORT, BRIDGES_IMPORT, CONFIG_FILTER_EXPORT, CONNECTION_EXPORT, connection,
        filter, provider,
    },
    call::Sandbox,
    connection::ConnectionModule,
    engine::{new_engine, start_epoch_clock},
    error::LoadError,
    filter::FilterModule,
    limits::Limits,
    provider::ProviderModule,
    registry::{LoadedModule, Registry},
    state::CallState,
};

pub struct PluginRuntime {
    sandbox: Sandbox,
    provider_linker: Linker<CallState>,
    filter_linker: Linker<CallState>,
    connection_linker: Linker<CallState>,
    compiled: Mutex<HashMap<[u8; 32], Component>>,
    /// Compiled modules on disk (`--cache-dir`), if any.
    disk_cache: Option<wasmtime::Cache>,
}

/// The worlds whose modules a registry is loaded with. An operator running
/// only some controllers leaves the other world's modules alone: not
/// compiled, not held in memory (carrier2mount's code alone is a few MiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Worlds {
    /// Bridge-mount providers, and the connection providers of their
    /// bridges.
    pub providers: bool,
    /// Config filters.
    pub filters: bool,
}

impl Worlds {
    pub const ALL: Self = Self {
        providers: true,
        filters: true,
    };

    /// Whether a module whose top-level exports are `exports` is wanted; a
    /// module of neither world is (loading it reports what is wrong).
    fn want(self, exports: &[String]) -> bool {
        let has = |name: &str| exports.iter().any(|e| e == name);
        if has(BRIDGE_MOUNT_EXPORT) || has(CONNECTION_EXPORT) {
            self.providers
        } else if has(CONFIG_FILTER_EXPORT) {
            self.filters
        } else {
            true
        }
    }
}

/// The names a component exports at its top level, read without compiling
/// it; `None` for bytes that are not a component (loading says why).
fn top_level_exports(bytes: &[u8]) -> Option<Vec<String>> {
    use wasmparser::{Parser, Payload};
    let mut names = Vec::new();
    // Nested modules and components have sections of their own.
    let mut depth = 0_usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.ok()? {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentExportSection(exports) if depth == 0 => {
                for export in exports {
                    names.push(export.ok()?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Some(names)
}

impl PluginRuntime {
    /// A runtime that compiles every module it loads.
    pub fn new(limits: Limits) -> anyhow::Result<Arc<Self>> {
        Self::build(limits, None)
    }

    /// A runtime that keeps compiled modules in `cache_dir` across restarts.
    pub fn with_cache_dir(limits: Limits, cache_dir: &Path) -> anyhow::Result<Arc<Self>> {
        std::fs::create_dir_all(cache_dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot create module cache directory {}: {e}",
                cache_dir.display()
            )
        })?;
        Self::build(limits, Some(cache_dir))
    }

    fn build(limits: Limits, cache_dir: Option<&Path>) -> anyhow::Result<Arc<Self>> {
        let (engine, disk_cache) = new_engine(limits, cache_dir)?;
        start_epoch_clock(&engine)?;
        let mut provider_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut provider_linker)?;
        provider::BridgeMountProvider::add_to_linker::<_, HasSelf<_>>(&mut provider_linker, |s| s)?;
        let mut filter_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut filter_linker)?;
        filter::ConfigFilterProvider::add_to_linker::<_, HasSelf<_>>(&mut filter_linker, |s| s)?;
        let mut connection_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut connection_linker)?;
        connection::ConnectionProvider::add_to_linker::<_, HasSelf<_>>(
            &mut connection_linker,
            |s| s,
        )?;
        Ok(Arc::new(Self {
            sandbox: Sandbox::new(engine, limits),
            provider_linker,
            filter_linker,
            connection_linker,
            compiled: Mutex::default(),
            disk_cache,
        }))
    }

    pub fn limits(&self) -> Limits {
        self.sandbox.limits()
    }

    pub fn engine(&self) -> &Engine {
        self.sandbox.engine()
    }

    /// Loads every `*.wasm` of `dir`. A module that cannot be loaded is
    /// reported in [`Registry::rejected`] and does not stop the others.
    pub async fn load_dir(self: &Arc<Self>, dir: &Path) -> Result<Registry, LoadError> {
        self.load_dirs(&[dir]).await
    }

    /// [`Self::load_dir`] over several directories into one registry, in
    /// their order (the bundled modules, then an administrator's): a name
    /// already taken by an earlier module is rejected.
    pub async fn load_dirs(self: &Arc<Self>, dirs: &[&Path]) -> Result<Registry, LoadError> {
        self.load_worlds(dirs, Worlds::ALL).await
    }

    /// [`Self::load_dirs`] for the modules of `worlds` only; the others are
    /// listed in [`Registry::skipped`].
    pub async fn load_worlds(
        self: &Arc<Self>,
        dirs: &[&Path],
        worlds: Worlds,
    ) -> Result<Registry, LoadError> {
        let mut registry = Registry::default();
        for dir in dirs {
            for path in Self::module_files(dir).await? {
                let loaded = match Self::read(&path).await {
                    Ok(bytes) => {
                        let exports = top_level_exports(&bytes).unwrap_or_default();
                        if !worlds.want(&exports) {
                            tracing::info!(path = %path.display(), "module not loaded: its controllers are not running");
                            registry.skipped.push(path);
                            continue;
                        }
                        self.load_bytes(&path, &bytes).await
                    }
                    Err(err) => Err(err),
                };
                match loaded {
                    Ok(module) => registry.insert(module),
                    Err(err) => {
                        tracing::error!(error = %err, "rejected module");
                        registry.rejected.push(err);
                    }
                }
            }
        }
        Ok(registry)
    }

    /// The `*.wasm` files of `dir`, sorted.
    async fn module_files(dir: &Path) -> Result<Vec<std::path::PathBuf>, LoadError> {
        let mut entries =
            tokio::fs::read_dir(dir)
                .await
                .map_err(|source| LoadError::Directory {
                    dir: dir.into(),
                    source,
                })?;
        let mut paths = Vec::new();
        while let Some(entry) =
            entries
                .next_entry()
                .await
                .map_err(|source| LoadError::Directory {
                    dir: dir.into(),
                    source,
                })?
        {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "wasm") {
                paths.push(path);
            }
        }
        paths.sort();
        Ok(paths)
    }

    /// Loads one module: compiles it (once per content), checks which world
    /// it implements, pre-instantiates it and reads its metadata.
    pub async fn load_file(self: &Arc<Self>, path: &Path) -> Result<LoadedModule, LoadError> {
        let bytes = Self::read(path).await?;
        self.load_bytes(path, &bytes).await
    }

    async fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
        tokio::fs::read(path)
            .await
            .map_err(|source| LoadError::Read {
                path: path.into(),
                source,
            })
    }

    async fn load_bytes(&self, path: &Path, bytes: &[u8]) -> Result<LoadedModule, LoadError> {
        let component = self.compile(path, bytes).await?;
        let exports: Vec<String> = component
            .component_type()
            .exports(self.engine())
            .map(|(name, _)| name.to_string())
            .collect();
        let link_error = |e: wasmtime::Error| LoadError::Link {
            path: path.into(),
            reason: format!("{e:#}"),
        };
        if exports.iter().any(|e| e == BRIDGE_MOUNT_EXPORT) {
            let pre = self
                .provider_linker
                .instantiate_pre(&component)
                .map_err(link_error)?;
            let pre = provider::BridgeMountProviderPre::new(pre).map_err(link_error)?;
            let renders_bridges = component
                .component_type()
                .imports(self.engine())
                .any(|(name, _)| name == BRIDGES_IMPORT);
            let module =
                ProviderModule::load(self.sandbox.clone(), path.into(), pre, renders_bridges)
                    .await?;
            Ok(LoadedModule::Provider(module))
        } else if exports.iter().any(|e| e == CONFIG_FILTER_EXPORT) {
            let pre = self
                .filter_linker
                .instantiate_pre(&component)
                .map_err(link_error)?;
            let pre = filter::ConfigFilterProviderPre::new(pre).map_err(link_error)?;
            let module = FilterModule::load(self.sandbox.clone(), path.into(), pre).await?;
            Ok(LoadedModule::Filter(module))
        } else if exports.iter().any(|e| e == CONNECTION_EXPORT) {
            let pre = self
                .connection_linker
                .instantiate_pre(&component)
                .map_err(link_error)?;
            let pre = connection::ConnectionProviderPre::new(pre).map_err(link_error)?;
            let module = ConnectionModule::load(self.sandbox.clone(), path.into(), pre).await?;
            Ok(LoadedModule::Connection(module))
        } else {
            Err(LoadError::UnknownWorld {
                path: path.into(),
                exports,
            })
        }
    }

    async fn compile(&self, path: &Path, bytes: &[u8]) -> Result<Component, LoadError> {
        let hash: [u8; 32] = Sha256::digest(bytes).into();
        if let Some(component) = self.cache().get(&hash) {
            return Ok(component.clone());
        }
        let engine = self.engine().clone();
        let owned = bytes.to_vec();
        // Cranelift is CPU-bound: keep it off the async workers.
        let component = tokio::task::spawn_blocking(move || Component::new(&engine, owned))
            .await
            .map_err(|e| LoadError::NotAComponent {
                path: path.into(),
                reason: e.to_string(),
            })?
            .map_err(|e| LoadError::NotAComponent {
                path: path.into(),
                reason: if is_core_module(bytes) {
                    "it is a core WebAssembly module; providers are components: build it \
                     with `cargo build --release --target wasm32-wasip2` (rustup target add \
                     wasm32-wasip2)"
                        .into()
                } else {
                    format!("{e:#}")
                },
            })?;
        self.cache().insert(hash, component.clone());
        Ok(component)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Component>> {
        // A panic while holding the lock leaves a valid map; keep using it.
        self.compiled
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Modules the disk cache held compiled, and modules it did not (so
    /// they were compiled); `None` without a cache directory.
    pub fn disk_cache_counts(&self) -> Option<(usize, usize)> {
        self.disk_cache
            .as_ref()
            .map(|c| (c.cache_hits(), c.cache_misses()))
    }

    /// How many distinct module contents have been compiled.
    pub fn compiled_count(&self) -> usize {
        self.cache().len()
    }
}

/// A core module's header: `\0asm`, version 1 (a component has layer 1).
fn is_core_module(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\0asm\x01\0\0\0")
}
