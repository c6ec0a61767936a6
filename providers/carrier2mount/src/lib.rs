//! carrier2mount: placeholder until the provider lands.
