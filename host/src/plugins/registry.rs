//! The modules available to the operator, by the name they give themselves.

use std::{collections::BTreeMap, sync::Arc};

use super::{error::LoadError, filter::FilterModule, provider::ProviderModule};

/// A loaded module of either world.
pub enum LoadedModule {
    Provider(ProviderModule),
    Filter(FilterModule),
}

#[derive(Default)]
pub struct Registry {
    providers: BTreeMap<String, Arc<ProviderModule>>,
    filters: BTreeMap<String, Arc<FilterModule>>,
    /// Files that were not loaded, with why.
    pub rejected: Vec<LoadError>,
    /// Files left alone: modules of a world whose controllers are not running.
    pub skipped: Vec<std::path::PathBuf>,
}

impl Registry {
    /// Adds a module; a second module with a name already taken is rejected.
    pub fn insert(&mut self, module: LoadedModule) {
        let (name, path, other) = match &module {
            LoadedModule::Provider(m) => (
                m.name().to_string(),
                m.path.clone(),
                self.providers.get(m.name()).map(|o| o.path.clone()),
            ),
            LoadedModule::Filter(m) => (
                m.name().to_string(),
                m.path.clone(),
                self.filters.get(m.name()).map(|o| o.path.clone()),
            ),
        };
        if let Some(other) = other {
            self.rejected
                .push(LoadError::DuplicateName { path, name, other });
            return;
        }
        match module {
            LoadedModule::Provider(m) => {
                tracing::info!(name, version = m.metadata.version, path = %m.path.display(), "loaded bridge-mount provider");
                self.providers.insert(name, Arc::new(m));
            }
            LoadedModule::Filter(m) => {
                tracing::info!(name, version = m.metadata.version, path = %m.path.display(), "loaded config filter");
                self.filters.insert(name, Arc::new(m));
            }
        }
    }

    /// Drops every provider whose declared scope exceeds its grant,
    /// recording why in `rejected`.
    pub fn refuse_ungranted(&mut self, grants: &super::grants::Grants) {
        let refused: Vec<(String, Vec<String>)> = self
            .providers
            .iter()
            .filter_map(|(name, m)| {
                grants
                    .check(name, &m.metadata.scope)
                    .err()
                    .map(|excess| (name.clone(), excess))
            })
            .collect();
        for (module, excess) in refused {
            if let Some(m) = self.providers.remove(&module) {
                let error = LoadError::NotGranted {
                    path: m.path.clone(),
                    module,
                    excess,
                };
                tracing::error!(error = %error, "rejected module");
                self.rejected.push(error);
            }
        }
    }

    pub fn provider(&self, name: &str) -> Option<Arc<ProviderModule>> {
        self.providers.get(name).cloned()
    }

    pub fn filter(&self, name: &str) -> Option<Arc<FilterModule>> {
        self.filters.get(name).cloned()
    }

    /// The config filter that declares it handles `kind` (`RequestHeaderModifier`,
    /// `ExtensionRef:GROUP/KIND`, ...); the first by module name if several do.
    pub fn filter_for(&self, kind: &str) -> Option<Arc<FilterModule>> {
        self.filters
            .values()
            .find(|f| f.metadata.handles.iter().any(|h| h == kind))
            .cloned()
    }

    pub fn provider_names(&self) -> impl Iterator<Item = &str> {
        self.providers.keys().map(String::as_str)
    }

    pub fn filter_names(&self) -> impl Iterator<Item = &str> {
        self.filters.keys().map(String::as_str)
    }
}
