//! The dashboard's files, compiled into the binary (no network needed to show it).

/// The page at `/`.
pub const INDEX_HTML: &str = include_str!("assets/index.html");

/// The page shown for a request without the access token.
pub const UNAUTHORIZED_HTML: &str = include_str!("assets/unauthorized.html");

/// Files under `/assets/`: (name, content type, bytes). A name not listed here is 404: no
/// request path ever reaches the file system.
pub const FILES: &[(&str, &str, &[u8])] = &[
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("assets/app.css"),
    ),
    (
        "charts.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/charts.js"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/app.js"),
    ),
    (
        "icon.svg",
        "image/svg+xml",
        include_bytes!("assets/icon.svg"),
    ),
];

/// The embedded file `name` with its content type.
pub fn get(name: &str) -> Option<(&'static str, &'static [u8])> {
    FILES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, t, b)| (*t, *b))
}

/// Bytes of the page and everything it loads.
pub fn page_weight() -> usize {
    INDEX_HTML.len() + FILES.iter().map(|(_, _, b)| b.len()).sum::<usize>()
}
