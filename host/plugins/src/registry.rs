//! The modules available to the operator, by the name they give themselves.

use std::{collections::BTreeMap, sync::Arc};

use super::{
    bindings::Capability, connection::ConnectionModule, error::LoadError, filter::FilterModule,
    provider::ProviderModule,
};

/// A loaded module of any world.
pub enum LoadedModule {
    Provider(ProviderModule),
    Filter(FilterModule),
    Connection(ConnectionModule),
}

#[derive(Default)]
pub struct Registry {
    providers: BTreeMap<String, Arc<ProviderModule>>,
    filters: BTreeMap<String, Arc<FilterModule>>,
    connections: BTreeMap<String, Arc<ConnectionModule>>,
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
            LoadedModule::Connection(m) => (
                m.name().to_string(),
                m.path.clone(),
                self.connections.get(m.name()).map(|o| o.path.clone()),
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
            LoadedModule::Connection(m) => {
                tracing::info!(name, version = m.metadata.version, path = %m.path.display(), "loaded connection provider");
                self.connections.insert(name, Arc::new(m));
            }
        }
    }

    /// Drops every module with cluster access (providers, connection
    /// providers) whose declared scope exceeds its grant, recording why in
    /// `rejected`.
    pub fn refuse_ungranted(&mut self, grants: &super::grants::Grants) {
        let refused = |scopes: Vec<(&String, &[Capability])>| -> Vec<(String, Vec<String>)> {
            scopes
                .into_iter()
                .filter_map(|(name, scope)| {
                    grants
                        .check(name, scope)
                        .err()
                        .map(|excess| (name.clone(), excess))
                })
                .collect()
        };
        let providers = refused(
            self.providers
                .iter()
                .map(|(n, m)| (n, m.metadata.scope.as_slice()))
                .collect(),
        );
        let connections = refused(
            self.connections
                .iter()
                .map(|(n, m)| (n, m.metadata.scope.as_slice()))
                .collect(),
        );
        let removed = providers
            .into_iter()
            .filter_map(|(module, excess)| {
                let path = self.providers.remove(&module)?.path.clone();
                Some((path, module, excess))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .chain(
                connections
                    .into_iter()
                    .filter_map(|(module, excess)| {
                        let path = self.connections.remove(&module)?.path.clone();
                        Some((path, module, excess))
                    })
                    .collect::<Vec<_>>(),
            );
        for (path, module, excess) in removed {
            let error = LoadError::NotGranted {
                path,
                module,
                excess,
            };
            tracing::error!(error = %error, "rejected module");
            self.rejected.push(error);
        }
    }

    pub fn provider(&self, name: &str) -> Option<Arc<ProviderModule>> {
        self.providers.get(name).cloned()
    }

    /// The connection provider a bridge names in `connectionProvider`.
    pub fn connection(&self, name: &str) -> Option<Arc<ConnectionModule>> {
        self.connections.get(name).cloned()
    }

    pub fn connection_names(&self) -> impl Iterator<Item = &str> {
        self.connections.keys().map(String::as_str)
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
