//! The server's certificate: self-signed for development, from PEM files for production.

use std::fmt;
use std::path::Path;

use crate::Error;

/// The certificate chain and private key a [`WebTransport`](crate::WebTransport) server
/// presents.
///
/// A browser accepts a certificate it trusts (from a public CA, for a name it connects
/// to): [`Certificate::from_pem_files`]. For development, or a game whose page gets the
/// server's hash from its own backend, [`Certificate::self_signed`] makes one that a
/// browser accepts through the WebTransport option `serverCertificateHashes` with
/// [`Certificate::hashes`]: the W3C rules for those are an X.509v3 certificate, an
/// ECDSA P-256 key, and a validity of at most 14 days, which it meets. Make a new one at
/// least every 14 days (a long-running server restarts, or reloads, before then).
pub struct Certificate {
    identity: wtransport::Identity,
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate").field("hashes", &self.hashes_hex()).finish_non_exhaustive()
    }
}

impl Certificate {
    /// A self-signed certificate for `names` (host names or IP addresses, as the page
    /// connects: `"localhost"`, `"127.0.0.1"`): ECDSA P-256, valid from now for 14 days.
    pub fn self_signed<I, S>(names: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let identity = wtransport::Identity::self_signed_builder()
            .subject_alt_names(names)
            .from_now_utc()
            .validity_days(14)
            .build()
            .map_err(|e| Error::Certificate(e.to_string()))?;
        Ok(Self { identity })
    }

    /// A certificate chain and its private key from PEM files (what a CA issues, or
    /// certbot writes: `fullchain.pem` and `privkey.pem`).
    pub async fn from_pem_files(chain: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<Self, Error> {
        let identity = wtransport::Identity::load_pemfiles(chain, key).await.map_err(|e| match e {
            wtransport::tls::error::PemLoadError::FileError { file, error } => {
                Error::Io(std::io::Error::new(error.kind(), format!("{}: {error}", file.display())))
            }
            other => Error::Certificate(other.to_string()),
        })?;
        Ok(Self { identity })
    }

    /// SHA-256 of each certificate of the chain (DER): what the browser's
    /// `serverCertificateHashes` takes, `{ algorithm: "sha-256", value }`.
    pub fn hashes(&self) -> Vec<[u8; 32]> {
        self.identity.certificate_chain().as_slice().iter().map(|c| *c.hash().as_ref()).collect()
    }

    /// [`Certificate::hashes`] in hexadecimal, to hand to a page.
    pub fn hashes_hex(&self) -> Vec<String> {
        self.hashes().iter().map(|h| h.iter().map(|b| format!("{b:02x}")).collect()).collect()
    }

    pub(crate) fn into_identity(self) -> wtransport::Identity {
        self.identity
    }
}
