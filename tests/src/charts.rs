//! What every chart the test kit draws shares: a TrueType font for its labels.

use plotters::style::FontStyle;

/// Where a TrueType font for the labels is looked for (Debian's DejaVu first).
const FONTS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Registers the first font found as `sans-serif` for the charts' labels, or says
/// what to install.
pub fn register_label_font() -> Result<(), String> {
    let font = FONTS
        .iter()
        .find_map(|font| std::fs::read(font).ok())
        .ok_or("no TrueType font found for the chart's labels (install fonts-dejavu-core)")?;
    // plotters keeps the registered font for the life of the process.
    let font: &'static [u8] = Box::leak(font.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, font)
        .map_err(|_| "the font could not be read".to_owned())
}
