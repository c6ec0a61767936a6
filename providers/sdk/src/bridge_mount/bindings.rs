//! What wit-bindgen generates for the `bridge-mount-provider` world: its own file, so
//! the typed helpers (`cluster`) can use it without importing the world's
//! module that uses them.

wit_bindgen::generate!({
    path: "../../wit",
    world: "bridge-mount-provider",
    // `bindings::export!` is expanded in provider crates, through the
    // crate-level `export_bridge_mount!` wrapper.
    pub_export_macro: true,
    // Providers compare what they render with what a pod holds.
    additional_derives: [PartialEq, Eq, Hash],
});
