//! A plain wasi:cli command: a valid component that implements no Pontoon
//! world, which the host must refuse to load.

fn main() {
    println!("not a provider");
}
