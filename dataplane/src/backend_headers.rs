//! `pontoon_backend_headers`: the filters of one backend of a rule
//! (HTTPRoute `backendRefs[].filters`, RequestHeaderModifier and
//! ResponseHeaderModifier). Praxis sends a rule to one cluster holding every
//! backend's endpoints, by weight, and its load balancer picks one; this
//! filter runs after it, reads the endpoint picked, and applies the header
//! changes of the backend that endpoint belongs to. The operator refuses a
//! rule whose backends share an endpoint, so each endpoint names one
//! backend.
//!
//! ```yaml
//! filter: pontoon_backend_headers
//! backends:
//!   - endpoints: ["10.244.0.5:8080"]
//!     request: {set: [{name: x-backend, value: v1}], add: [], remove: []}
//!     response: {set: [], add: [], remove: [x-internal]}
//! ```

use std::{collections::HashMap, net::SocketAddr, sync::Arc};

use async_trait::async_trait;
use http::{HeaderName, HeaderValue};
use praxis_filter::{
    FilterAction, FilterError, HttpFilter, HttpFilterContext, parse_filter_config,
};
use serde::Deserialize;

pub const NAME: &str = "pontoon_backend_headers";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    backends: Vec<BackendConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendConfig {
    endpoints: Vec<SocketAddr>,
    #[serde(default)]
    request: ChangesConfig,
    #[serde(default)]
    response: ChangesConfig,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangesConfig {
    #[serde(default)]
    set: Vec<Pair>,
    #[serde(default)]
    add: Vec<Pair>,
    #[serde(default)]
    remove: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Pair {
    name: String,
    value: String,
}

/// Header changes, parsed once.
#[derive(Debug, Default)]
struct Changes {
    set: Vec<(HeaderName, HeaderValue)>,
    add: Vec<(HeaderName, HeaderValue)>,
    remove: Vec<HeaderName>,
}

/// One backend's changes, both ways.
#[derive(Debug)]
struct Backend {
    request: Changes,
    response: Changes,
}

pub struct BackendHeaders {
    by_endpoint: HashMap<SocketAddr, Arc<Backend>>,
}

/// Which backend a request went to, for its response.
struct Chosen(Arc<Backend>);

fn pairs(pairs: Vec<Pair>, what: &str) -> Result<Vec<(HeaderName, HeaderValue)>, FilterError> {
    pairs
        .into_iter()
        .map(|p| {
            let name = HeaderName::try_from(p.name.as_str())
                .map_err(|e| format!("{NAME}: {what} header name `{}`: {e}", p.name))?;
            let value = HeaderValue::from_str(&p.value)
                .map_err(|e| format!("{NAME}: {what} header `{}` value: {e}", p.name))?;
            Ok((name, value))
        })
        .collect()
}

impl Changes {
    fn parse(config: ChangesConfig, what: &str) -> Result<Self, FilterError> {
        Ok(Self {
            set: pairs(config.set, what)?,
            add: pairs(config.add, what)?,
            remove: config
                .remove
                .iter()
                .map(|n| {
                    HeaderName::try_from(n.as_str())
                        .map_err(|e| format!("{NAME}: {what} header name `{n}`: {e}").into())
                })
                .collect::<Result<_, FilterError>>()?,
        })
    }
}

impl BackendHeaders {
    pub fn from_config(config: &serde_yaml::Value) -> Result<Box<dyn HttpFilter>, FilterError> {
        let config: Config = parse_filter_config(NAME, config)?;
        let mut by_endpoint = HashMap::new();
        for backend in config.backends {
            let changes = Arc::new(Backend {
                request: Changes::parse(backend.request, "request")?,
                response: Changes::parse(backend.response, "response")?,
            });
            for endpoint in backend.endpoints {
                if by_endpoint.insert(endpoint, changes.clone()).is_some() {
                    return Err(format!(
                        "{NAME}: endpoint {endpoint} belongs to two backends: their filters cannot be told apart"
                    )
                    .into());
                }
            }
        }
        Ok(Box::new(Self { by_endpoint }))
    }

    /// The backend of the endpoint the load balancer picked.
    fn chosen(&self, ctx: &HttpFilterContext<'_>) -> Option<Arc<Backend>> {
        let address: SocketAddr = ctx.upstream.as_ref()?.address.parse().ok()?;
        self.by_endpoint.get(&address).cloned()
    }
}

#[async_trait]
impl HttpFilter for BackendHeaders {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn on_request(
        &self,
        ctx: &mut HttpFilterContext<'_>,
    ) -> Result<FilterAction, FilterError> {
        let Some(backend) = self.chosen(ctx) else {
            return Ok(FilterAction::Continue);
        };
        let changes = &backend.request;
        ctx.request_headers_to_remove
            .extend(changes.remove.iter().cloned());
        ctx.request_headers_to_set
            .extend(changes.set.iter().cloned());
        ctx.extra_request_headers
            .extend(changes.add.iter().filter_map(|(n, v)| {
                Some((n.as_str().to_owned().into(), v.to_str().ok()?.to_owned()))
            }));
        ctx.insert_filter_state(Chosen(backend));
        Ok(FilterAction::Continue)
    }

    async fn on_response(
        &self,
        ctx: &mut HttpFilterContext<'_>,
    ) -> Result<FilterAction, FilterError> {
        let Some(Chosen(backend)) = ctx.remove_filter_state::<Chosen>() else {
            return Ok(FilterAction::Continue);
        };
        let Some(response) = ctx.response_header.as_deref_mut() else {
            return Ok(FilterAction::Continue);
        };
        let changes = &backend.response;
        for name in &changes.remove {
            response.headers.remove(name);
        }
        for (name, value) in &changes.set {
            response.headers.insert(name.clone(), value.clone());
        }
        for (name, value) in &changes.add {
            response.headers.append(name.clone(), value.clone());
        }
        if !(changes.remove.is_empty() && changes.set.is_empty() && changes.add.is_empty()) {
            ctx.response_headers_modified = true;
        }
        Ok(FilterAction::Continue)
    }
}

#[cfg(test)]
mod tests;
