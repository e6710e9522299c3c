//! Time series drawn as SVG with plotters (SVG backend only: text is SVG text, so no font
//! file or system library is needed). Used by the netsim bench's figures (`plots.rs`,
//! `docs/plots/`) and the loopback demo's `--plot FILE` (porous-loopback's `plot`), which
//! include this file.

use std::error::Error;

use plotters::prelude::*;

pub(crate) const BLUE: RGBColor = RGBColor(31, 119, 180);
pub(crate) const LIGHT_BLUE: RGBColor = RGBColor(130, 180, 220);
pub(crate) const RED: RGBColor = RGBColor(214, 39, 40);
pub(crate) const ORANGE: RGBColor = RGBColor(255, 150, 60);
pub(crate) const GREEN: RGBColor = RGBColor(44, 160, 44);
pub(crate) const GREY: RGBColor = RGBColor(120, 120, 120);

const WIDTH: u32 = 960;
const PANEL_HEIGHT: u32 = 230;

/// One line of a panel: dots (one per event, such as a packet's latency) or a line
/// through samples.
pub(crate) struct Line {
    name: String,
    points: Vec<(f64, f64)>,
    color: RGBColor,
    dots: bool,
}

/// A line through `points`, (seconds, value).
pub(crate) fn line(name: &str, points: Vec<(f64, f64)>, color: RGBColor) -> Line {
    Line { name: name.to_string(), points, color, dots: false }
}

/// A dot at each of `points`, (seconds, value).
pub(crate) fn dots(name: &str, points: Vec<(f64, f64)>, color: RGBColor) -> Line {
    Line { name: name.to_string(), points, color, dots: true }
}

/// One chart of a figure: its title, the unit of its y axis, its lines.
pub(crate) struct Panel {
    title: String,
    unit: &'static str,
    lines: Vec<Line>,
}

pub(crate) fn panel(title: &str, unit: &'static str, lines: Vec<Line>) -> Panel {
    Panel { title: title.to_string(), unit, lines }
}

/// The figure as an SVG document: its title over the panels, stacked, time on x.
pub(crate) fn svg(title: &str, panels: &[Panel]) -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    {
        let height = 40 + PANEL_HEIGHT * panels.len() as u32;
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, ("sans-serif", 17))?;
        for (area, p) in root.split_evenly((panels.len(), 1)).iter().zip(panels) {
            let all = || p.lines.iter().flat_map(|l| l.points.iter());
            let x_max = all().map(|&(x, _)| x).fold(0.0, f64::max).max(1e-3);
            let y_max = all().map(|&(_, y)| y).fold(0.0, f64::max).max(1e-3) * 1.08;
            let mut chart = ChartBuilder::on(area)
                .caption(&p.title, ("sans-serif", 14))
                .margin(6)
                .x_label_area_size(32)
                .y_label_area_size(56)
                .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
            chart
                .configure_mesh()
                .x_desc("time (s)")
                .y_desc(p.unit)
                .x_labels(12)
                .y_labels(6)
                .max_light_lines(0)
                .bold_line_style(RGBColor(225, 225, 225))
                .draw()?;
            for l in &p.lines {
                let color = l.color;
                let drawn = if l.dots {
                    chart.draw_series(l.points.iter().map(|&p| Circle::new(p, 2, color.filled())))?
                } else {
                    chart.draw_series(LineSeries::new(l.points.iter().copied(), color.stroke_width(1)))?
                };
                drawn
                    .label(&l.name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(GREY.mix(0.5))
                .label_font(("sans-serif", 12))
                .draw()?;
        }
        root.present()?;
    }
    Ok(out)
}
