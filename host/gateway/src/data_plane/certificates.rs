//! Where the Praxis Deployment finds the listeners' certificates: one
//! Secret of the Gateway's own holding a copy of each certificate Secret a
//! listener names, and the client CA bundles, mounted beside the config.

use crate::data_plane::model::CertificateFiles;

/// Where the Praxis Deployment mounts the listeners' certificates: beside the
/// read-only config volume, not inside it (a container runtime cannot make a
/// mount point inside a read-only volume).
pub const TLS_MOUNT_ROOT: &str = "/etc/praxis-tls";

/// The file (in the Gateway's certificate Secret, mounted at
/// [`TLS_MOUNT_ROOT`]) holding the client CA certificates of `port`.
pub fn client_ca_file(port: u16) -> String {
    format!("client-ca-{port}.pem")
}

/// A certificate Secret a listener uses.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CertificateSecret {
    pub namespace: String,
    pub name: String,
}

impl CertificateSecret {
    /// Where the Deployment mounts it: its files in the Gateway's own
    /// certificate Secret (see `children::certificates`).
    pub fn files(&self) -> CertificateFiles {
        let (cert, key) = self.keys();
        CertificateFiles {
            cert_path: format!("{TLS_MOUNT_ROOT}/{cert}"),
            key_path: format!("{TLS_MOUNT_ROOT}/{key}"),
        }
    }

    /// Its certificate's and key's keys in the Gateway's certificate Secret.
    pub fn keys(&self) -> (String, String) {
        let stem = format!("{}-{}", self.namespace, self.name);
        (format!("{stem}.crt"), format!("{stem}.key"))
    }
}
