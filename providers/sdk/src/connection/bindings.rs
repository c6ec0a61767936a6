//! What wit-bindgen generates for the `connection-provider` world: its own file, so
//! the typed helpers (`cluster`) can use it without importing the world's
//! module that uses them.

wit_bindgen::generate!({
    path: "../../wit",
    world: "connection-provider",
    // `bindings::export!` is expanded in provider crates, through the
    // crate-level `export_connection!` wrapper.
    pub_export_macro: true,
});
