//! SCRAM secrets that pgcorral derives from plaintext passwords, cached so that each login does
//! not rerun PBKDF2, and the made-up secrets of unknown users. Shared through the services
//! handle; used by client authentication.

use pgwire::auth::scram::ScramSecret;

/// Iterations used when pgcorral derives a SCRAM secret from a plaintext password.
const SCRAM_ITERATIONS: u32 = 4096;

/// Derived SCRAM secrets for plaintext passwords, so each login does not rerun PBKDF2.
pub struct SecretCache {
    secrets: parking_lot::Mutex<std::collections::HashMap<(String, String), ScramSecret>>,
    /// Random per process: keys the made-up salts of unknown users.
    mock_key: [u8; 16],
}

impl Default for SecretCache {
    fn default() -> Self {
        SecretCache {
            secrets: Default::default(),
            mock_key: rand::random(),
        }
    }
}

impl SecretCache {
    pub(crate) fn get(&self, user: &str, password: &str) -> ScramSecret {
        let key = (user.to_string(), password.to_string());
        if let Some(s) = self.secrets.lock().get(&key) {
            return s.clone();
        }
        let salt: [u8; 16] = rand::random();
        let secret = ScramSecret::from_password(password, &salt, SCRAM_ITERATIONS);
        self.secrets.lock().entry(key).or_insert(secret).clone()
    }

    /// A secret for a user pgcorral does not know, that no proof matches. Its challenge looks
    /// like a real user's: the usual iteration count, and a salt of the user's own that is the
    /// same on every attempt (a keyed hash of the name), as PostgreSQL's mock authentication does.
    pub(crate) fn mock(&self, user: &str) -> ScramSecret {
        let keyed = ScramSecret::from_password(user, &self.mock_key, 1).stored_key;
        ScramSecret {
            iterations: SCRAM_ITERATIONS,
            salt: keyed[..16].to_vec(),
            stored_key: rand::random(),
            server_key: rand::random(),
        }
    }
}
