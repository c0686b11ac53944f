//! sqlx's `migrate!` embeds `../migrations` when the crate compiles, and a migration added
//! to it changes no Rust file: rebuild when the folder changes (sqlx's advice).

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
