//! Types shared by the console in the browser and the server.

use serde::{Deserialize, Serialize};

/// The person signed in to the console.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionUser {
    pub id: String,
    pub email: String,
    /// `admin` or `support`.
    pub role: String,
}

impl SessionUser {
    pub fn is_admin(&self) -> bool {
        self.role == "admin"
    }
}
