//! Which program the Gateways' pods run, and so what their configs may ask
//! of it: Pontoon's data plane (`pontoon-dataplane`: Praxis plus the
//! `pontoon_*` filters, `dataplane/`) by default, or stock Praxis when the
//! operator is given `--praxis-image`. The GatewayClass claims the features
//! of the program in use, and a rule that needs a `pontoon_*` filter is
//! refused on stock Praxis, saying so.

/// The features every data plane serves (sorted, as the spec asks of
/// `supportedFeatures`); see docs/gateway-api-support.md.
const COMMON_FEATURES: &[&str] = &[
    "BackendTLSPolicy",
    "GRPCRoute",
    "Gateway",
    "GatewayAddressEmpty",
    "GatewayBackendClientCertificate",
    "GatewayFrontendClientCertificateValidation",
    "GatewayHTTPListenerIsolation",
    "GatewayInfrastructure",
    "GatewayPort8080",
    "GatewayStaticAddresses",
    "HTTPRoute",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteBackendTimeout",
    "HTTPRouteDestinationPortMatching",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteParentRefPort",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    // A rule's `retry`: Praxis's own cluster `retry_policy`. The field is
    // the experimental channel's: with the standard CRDs no route has one.
    // Not HTTPRouteRetryConnectionError: Praxis 0.7.5 retries a connection
    // closed or reset after the request went out only when it was a reused
    // one, whatever the policy (docs/gateway-api-support.md).
    "HTTPRouteRetry",
    "HTTPRouteRetryBackendTimeout",
    "HTTPRouteSchemeRedirect",
    "ListenerSet",
    "ReferenceGrant",
    "TCPRoute",
    "TLSRoute",
    "TLSRouteModeMixed",
    "TLSRouteModeTerminate",
];

/// What only Pontoon's data plane serves, each by a `pontoon_*` filter.
const PONTOON_FEATURES: &[&str] = &[
    // pontoon_backend_tls
    "BackendTLSPolicySANValidation",
    // pontoon_misdirected's front, which ends such a port's TLS
    "GatewayFrontendClientCertificateValidationInsecureFallback",
    // pontoon_misdirected
    "GatewayHTTPSListenerDetectMisdirectedRequests",
    // pontoon_redirect
    "HTTPRoute303RedirectStatusCode",
    // pontoon_cors
    "HTTPRouteCORS",
    // pontoon_redirect
    "HTTPRoutePathRedirect",
    // pontoon_query_params
    "HTTPRouteQueryParamMatching",
    // pontoon_backend_headers
    "HTTPRouteBackendRequestHeaderModification",
    // pontoon_mirror
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
];

/// The prefix of the filters only Pontoon's data plane has.
pub const PONTOON_FILTER_PREFIX: &str = "pontoon_";

/// The program a Gateway's pods run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataPlane {
    /// `pontoon-dataplane`: Praxis 0.7.5 and Pontoon's filters.
    #[default]
    Pontoon,
    /// `praxis` 0.7.5 as published (`--praxis-image`).
    StockPraxis,
}

impl DataPlane {
    /// Pontoon's data-plane image of this release (`dataplane/`, built
    /// with the operator's version).
    pub const DEFAULT_IMAGE: &str = concat!(
        "ghcr.io/pontoon-operator/pontoon-dataplane:",
        env!("CARGO_PKG_VERSION")
    );

    /// The data plane and image the operator's flags choose: stock Praxis
    /// from `--praxis-image` when given, else Pontoon's data plane.
    pub fn chosen(praxis_image: Option<String>, data_plane_image: String) -> (Self, String) {
        match praxis_image {
            Some(image) => (Self::StockPraxis, image),
            None => (Self::Pontoon, data_plane_image),
        }
    }

    /// The GatewayClass's `supportedFeatures` with this data plane, sorted.
    pub fn supported_features(self) -> Vec<&'static str> {
        let mut features = COMMON_FEATURES.to_vec();
        if self == Self::Pontoon {
            features.extend_from_slice(PONTOON_FEATURES);
            features.sort_unstable();
        }
        features
    }

    /// Whether this data plane has the filter named `filter`.
    pub fn has_filter(self, filter: &str) -> bool {
        self == Self::Pontoon || !filter.starts_with(PONTOON_FILTER_PREFIX)
    }

    /// Why a rule that needs `what` cannot be served here, or `None`.
    pub fn lacks(self, what: &str) -> Option<String> {
        (self == Self::StockPraxis).then(|| {
            format!(
                "{what} needs Pontoon's data plane, and this operator runs stock Praxis for its \
                 Gateways (--praxis-image)"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_are_sorted_and_stock_praxis_claims_none_of_pontoons() {
        for plane in [DataPlane::Pontoon, DataPlane::StockPraxis] {
            let features = plane.supported_features();
            let mut sorted = features.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(features, sorted, "{plane:?}");
        }
        let stock = DataPlane::StockPraxis.supported_features();
        assert!(PONTOON_FEATURES.iter().all(|f| !stock.contains(f)));
        assert_eq!(
            DataPlane::Pontoon.supported_features().len(),
            COMMON_FEATURES.len() + PONTOON_FEATURES.len()
        );
        assert!(DataPlane::StockPraxis.has_filter("redirect"));
        assert!(!DataPlane::StockPraxis.has_filter("pontoon_redirect"));
        assert!(DataPlane::Pontoon.has_filter("pontoon_redirect"));
    }
}
