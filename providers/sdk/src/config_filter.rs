//! The `config-filter-batch-provider` world: implement [`Guest`] and export
//! it with [`export_config_filter!`](crate::export_config_filter), which also
//! exports `translate-batch` as [`translate_each`] over your `translate`.

/// Bindings generated from `wit/` by wit-bindgen.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "config-filter-batch-provider",
        // `bindings::export!` is expanded in provider crates, through the
        // crate-level `export_config_filter!` wrapper.
        pub_export_macro: true,
    });
}

pub use bindings::exports::pontoon::provider::config_filter::{
    FilterError, FilterMetadata, Guest, RouteContext,
};
pub use bindings::exports::pontoon::provider::config_filter_batch::{
    FilterRequest, Guest as BatchGuest,
};

/// `translate-batch` as the contract defines it: `T::translate` for each
/// request, answers in the requests' order.
pub fn translate_each<T: Guest>(
    requests: Vec<FilterRequest>,
) -> Vec<Result<Vec<String>, FilterError>> {
    requests
        .into_iter()
        .map(|request| T::translate(request.filter, request.context))
        .collect()
}

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

/// Exports a type implementing [`Guest`] as the component's `config-filter`,
/// and `config-filter-batch` as [`translate_each`] over it.
///
/// ```ignore
/// struct MyFilter;
/// impl pontoon_provider_sdk::config_filter::Guest for MyFilter { /* ... */ }
/// pontoon_provider_sdk::export_config_filter!(MyFilter);
/// ```
///
/// `export_config_filter!(MyFilter with_types_in my_bindings)` exports
/// through bindings of your own of the same world; the type then implements
/// both interfaces' `Guest` itself.
#[macro_export]
macro_rules! export_config_filter {
    ($ty:ident) => {
        impl $crate::config_filter::BatchGuest for $ty {
            fn translate_batch(
                requests: ::std::vec::Vec<$crate::config_filter::FilterRequest>,
            ) -> ::std::vec::Vec<
                ::std::result::Result<
                    ::std::vec::Vec<::std::string::String>,
                    $crate::config_filter::FilterError,
                >,
            > {
                $crate::config_filter::translate_each::<$ty>(requests)
            }
        }
        $crate::config_filter::bindings::export!($ty with_types_in $crate::config_filter::bindings);
    };
    ($ty:ident with_types_in $($path:tt)*) => {
        $crate::config_filter::bindings::export!($ty with_types_in $($path)*);
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Echoes the filter, refuses an empty one.
    struct Echo;

    impl Guest for Echo {
        fn metadata() -> FilterMetadata {
            FilterMetadata {
                name: "echo".into(),
                version: "0".into(),
                description: String::new(),
                handles: Vec::new(),
            }
        }

        fn translate(filter: String, context: RouteContext) -> Result<Vec<String>, FilterError> {
            if filter.is_empty() {
                return Err(FilterError::invalid_input(context.location()));
            }
            Ok(vec![filter, context.filter_index.to_string()])
        }
    }

    fn request(filter: &str, index: u32) -> FilterRequest {
        FilterRequest {
            filter: filter.into(),
            context: RouteContext {
                route_namespace: "ns".into(),
                route_name: "web".into(),
                rule_index: 0,
                filter_index: index,
                gateway_namespace: "ns".into(),
                gateway_name: "gw".into(),
            },
        }
    }

    #[test]
    fn a_batch_answers_each_request_in_order_as_translate_does() {
        let answers =
            translate_each::<Echo>(vec![request("a", 0), request("", 1), request("c", 2)]);
        let texts: Vec<String> = answers.iter().map(|a| format!("{a:?}")).collect();
        assert_eq!(
            texts,
            [
                r#"Ok(["a", "0"])"#,
                r#"Err(FilterError::InvalidInput("HTTPRoute ns/web rule 0 filter 1"))"#,
                r#"Ok(["c", "2"])"#,
            ]
        );
        assert!(translate_each::<Echo>(Vec::new()).is_empty());
    }
}
