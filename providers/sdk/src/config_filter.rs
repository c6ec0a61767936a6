//! The `config-filter-provider` world: implement [`Guest`] and export it with
//! [`export_config_filter!`](crate::export_config_filter).

/// Bindings generated from `wit/` by wit-bindgen.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "config-filter-provider",
        // `bindings::export!` is expanded in provider crates, through the
        // crate-level `export_config_filter!` wrapper.
        pub_export_macro: true,
    });
}

pub use bindings::exports::pontoon::provider::config_filter::{
    FilterError, FilterMetadata, Guest, RouteContext,
};

impl FilterError {
    /// The filter's fields are wrong.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::InvalidInput(message.into())
    }

    /// A valid filter the module cannot express.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::Unsupported(message.into())
    }

    /// Anything else.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed(message.into())
    }
}

impl RouteContext {
    /// Where the filter stands, for messages: `ns/route rule 0 filter 1`.
    pub fn location(&self) -> String {
        format!(
            "HTTPRoute {}/{} rule {} filter {}",
            self.route_namespace, self.route_name, self.rule_index, self.filter_index
        )
    }
}

/// Exports a type implementing [`Guest`] as the component's `config-filter`.
///
/// ```ignore
/// struct MyFilter;
/// impl pontoon_provider_sdk::config_filter::Guest for MyFilter { /* ... */ }
/// pontoon_provider_sdk::export_config_filter!(MyFilter);
/// ```
#[macro_export]
macro_rules! export_config_filter {
    ($ty:ident) => {
        $crate::config_filter::bindings::export!($ty with_types_in $crate::config_filter::bindings);
    };
    ($ty:ident with_types_in $($path:tt)*) => {
        $crate::config_filter::bindings::export!($ty with_types_in $($path)*);
    };
}
