//! What the mount controller and the bridge controller share, made once by
//! whoever starts them (`pontoon run`'s `operator.rs`), before either runs:
//! the book of what each mount rendered, the admission guard, and the
//! admission records.

use std::sync::Arc;

use futures::channel::mpsc::UnboundedReceiver;
use kube::{Client, runtime::reflector::ObjectRef};

use crate::{
    admitted::Admissions, bridges::Book, crd::GefyraBridge, guard::Guard, settings::MountSettings,
};

#[derive(Clone)]
pub struct Shared {
    /// Written by the mount controller, read by the bridge controller.
    pub book: Arc<Book>,
    pub guard: Arc<Guard>,
    pub admissions: Arc<Admissions>,
}

/// The bridges whose rendering changed, as the book reports them: the bridge
/// controller's to consume.
pub type Rendered = UnboundedReceiver<ObjectRef<GefyraBridge>>;

impl Shared {
    /// Starts the guard's watch of the admission policies.
    pub fn new(client: &Client, settings: &MountSettings) -> (Self, Rendered) {
        let (book, rendered) = Book::new();
        let shared = Self {
            book: Arc::new(book),
            guard: Guard::watch(client.clone(), settings.guard.clone()),
            admissions: Admissions::new(client.clone(), &settings.operator_namespace),
        };
        (shared, rendered)
    }
}
