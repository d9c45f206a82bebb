//! Helpers shared by the end-to-end test files.

/// `DATABASE_URL` (or the local default) with its database replaced by `db`.
pub(crate) fn url_for(db: &str) -> String {
    let base = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let base = base.split('?').next().unwrap_or_default().to_owned();
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let cut = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    format!("{}/{db}", &base[..cut])
}
