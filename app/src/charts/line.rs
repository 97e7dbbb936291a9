//! Draws line charts with plotters' SVG backend. The SVG is themable: text, axes and grid are
//! drawn in sentinel colours that become `currentColor`, and every series colour gets a class
//! (`s0`..`s5`) so the dark theme's stylesheet can swap the palette. Hover values come from an
//! overlay of invisible circles, each with a `<title>` the browser shows as a tooltip.
//!
//! Palette (light on #ffffff / dark on #161b22, WCAG contrast; graphics need 3:1, these reach
//! text's 4.5:1): #2563EB 5.2 / #60A5FA 6.8, #B45309 5.0 / #FBBF24 10.4, #047857 5.5 / #34D399
//! 9.0, #BE185D 6.0 / #F472B6 6.5, #7C3AED 5.7 / #A78BFA 6.4, #0E7490 5.4 / #22D3EE 9.6.

use super::smooth::ema;
use super::{ChartOptions, Series, XAxis};
use crate::code::python::escape_html;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;

/// Why a chart could not be drawn. The messages are shown to people in place of the chart.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChartError {
    /// A log-scale y axis was asked for, and no value is above zero (points at or below zero
    /// are left out; this is when nothing is left).
    #[error(
        "log scale shows values above zero only, and this chart has none; switch log scale off to see it"
    )]
    NothingPositiveForLog,
    /// The smoothing weight is outside [0, 1).
    #[error("smoothing must be at least 0 and below 1, got {0}")]
    Smoothing(f64),
    /// The requested size is too small to hold axes and labels.
    #[error("a chart needs at least 200x120 pixels, got {width}x{height}")]
    Size { width: u32, height: u32 },
    /// plotters reported an error while drawing (a bug here, not bad data).
    #[error("drawing the chart failed: {0}")]
    Draw(String),
}

/// Sentinel colours replaced by `currentColor` after drawing.
const FG: RGBColor = RGBColor(1, 2, 3);
const GRID: RGBColor = RGBColor(4, 5, 6);
/// Light-theme series colours; `style/main.css` maps `.s0`..`.s5` to the dark ones.
pub const PALETTE: [RGBColor; 6] = [
    RGBColor(0x25, 0x63, 0xEB),
    RGBColor(0xB4, 0x53, 0x09),
    RGBColor(0x04, 0x78, 0x57),
    RGBColor(0xBE, 0x18, 0x5D),
    RGBColor(0x7C, 0x3A, 0xED),
    RGBColor(0x0E, 0x74, 0x90),
];
/// At most this many hover targets per series; more would only weigh the page down.
const MAX_HOVER_POINTS: usize = 200;

/// A series after smoothing and x-axis choice: (x, y, raw y), and its band (x, low, high).
struct Prepared<'a> {
    name: &'a str,
    points: Vec<(f64, f64, f64)>,
    band: Vec<(f64, f64, f64)>,
}

struct Hover {
    x: i32,
    y: i32,
    class: usize,
    title: String,
}

/// Renders `series` as an SVG document string. Non-finite values are skipped (a curve may
/// start late); an empty chart says "No data yet".
pub fn render_line_chart(series: &[Series], opts: &ChartOptions) -> Result<String, ChartError> {
    if !(0.0..1.0).contains(&opts.smoothing) {
        return Err(ChartError::Smoothing(opts.smoothing));
    }
    if opts.width < 200 || opts.height < 120 {
        return Err(ChartError::Size {
            width: opts.width,
            height: opts.height,
        });
    }
    let max_time = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.time_s))
        .filter(|t| t.is_finite())
        .fold(0.0, f64::max);
    let (x_div, x_label) = match opts.x_axis {
        XAxis::Step => (1.0, "step"),
        XAxis::Time if max_time > 7200.0 => (3600.0, "time (h)"),
        XAxis::Time if max_time > 120.0 => (60.0, "time (min)"),
        XAxis::Time => (1.0, "time (s)"),
    };
    let mut prepared = Vec::with_capacity(series.len());
    let mut dropped = 0usize;
    for s in series {
        let raw: Vec<f64> = s.points.iter().map(|p| p.value).collect();
        let smooth = ema(&raw, opts.smoothing);
        // The band is smoothed like its line, so the two stay together.
        let has_band = s.band.len() == s.points.len() && !s.band.is_empty();
        let (lo, hi): (Vec<f64>, Vec<f64>) = if has_band {
            let (l, h): (Vec<f64>, Vec<f64>) = s.band.iter().copied().unzip();
            (ema(&l, opts.smoothing), ema(&h, opts.smoothing))
        } else {
            (Vec::new(), Vec::new())
        };
        let mut band = Vec::new();
        let mut points = Vec::with_capacity(raw.len());
        for (i, ((p, &y), &r)) in s.points.iter().zip(&smooth).zip(&raw).enumerate() {
            let x = match opts.x_axis {
                XAxis::Step => p.step + opts.step_offset,
                XAxis::Time => p.time_s / x_div,
            };
            if !(x.is_finite() && y.is_finite()) {
                continue;
            }
            // A log axis has no place for 0 or below: those points are left out (the chart
            // says how many, `non_positive_points`), not the whole chart.
            if opts.log_y && (r <= 0.0 || y <= 0.0) {
                dropped += 1;
                continue;
            }
            points.push((x, y, r));
            if let (Some(&l), Some(&h)) = (lo.get(i), hi.get(i)) {
                // A band that cannot sit on a log axis is left out, not the chart.
                if l.is_finite() && h.is_finite() && !(opts.log_y && l <= 0.0) {
                    band.push((x, l, h));
                }
            }
        }
        prepared.push(Prepared {
            name: &s.name,
            points,
            band,
        });
    }

    let kept = prepared.iter().map(|p| p.points.len()).sum::<usize>();
    if opts.log_y && kept == 0 && dropped > 0 {
        return Err(ChartError::NothingPositiveForLog);
    }
    let mut buf = String::new();
    let hovers = {
        let root = SVGBackend::with_string(&mut buf, (opts.width, opts.height)).into_drawing_area();
        let hovers = draw(&root, &prepared, opts, x_label)?;
        root.present().map_err(draw_err)?;
        hovers
    };
    Ok(finish_svg(buf, opts, series.len(), &hovers))
}

fn draw_err<E: std::fmt::Display>(e: E) -> ChartError {
    ChartError::Draw(e.to_string())
}

/// Text of `px` CSS pixels (plotters' SVG backend writes `font-size` as the size / 1.24).
fn font(px: f64) -> TextStyle<'static> {
    ("sans-serif", px * 1.24).into_font().color(&FG)
}

fn draw(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    series: &[Prepared<'_>],
    opts: &ChartOptions,
    x_label: &str,
) -> Result<Vec<Hover>, ChartError> {
    let all = || series.iter().flat_map(|s| s.points.iter());
    if all().next().is_none() {
        let (w, h) = root.dim_in_pixel();
        let style = font(15.0).pos(Pos::new(HPos::Center, VPos::Center));
        root.draw(&Text::new(
            "No data yet",
            (w as i32 / 2, h as i32 / 2),
            style,
        ))
        .map_err(draw_err)?;
        return Ok(Vec::new());
    }
    let legend_h = if opts.svg_legend {
        legend_height(series, opts.width)
    } else {
        0
    };
    let (legend, plot) = root.split_vertically(legend_h);
    if opts.svg_legend {
        draw_legend(&legend, series)?;
    }

    let (xmin, xmax) = min_max(all().map(|p| p.0));
    let x_range = x_range(xmin, xmax);
    let band = || series.iter().flat_map(|s| s.band.iter());
    let (ymin, ymax) = min_max(all().map(|p| p.1).chain(band().flat_map(|b| [b.1, b.2])));
    if opts.log_y {
        let (lo, hi) = if is_flat(ymin, ymax) {
            (ymin / 2.0, ymax * 2.0)
        } else {
            (ymin / 1.1, ymax * 1.1)
        };
        draw_plot(
            &plot,
            series,
            x_range,
            (lo..hi).log_scale(),
            opts,
            x_label,
            None,
        )
    } else {
        let (lo, hi) = y_range(ymin, ymax);
        draw_plot(&plot, series, x_range, lo..hi, opts, x_label, Some(hi - lo))
    }
}

/// Whether `lo..hi` is one value up to rounding (1 vs 1.0000000000000002 is not a range to
/// stretch over the chart's height).
fn is_flat(lo: f64, hi: f64) -> bool {
    hi - lo <= 1e-9 * lo.abs().max(hi.abs()).max(f64::MIN_POSITIVE)
}

/// The linear y axis for values from `lo` to `hi`: 5% room above and below, and a flat series
/// gets a band of 10% of its value (at least 0.1) around it.
pub fn y_range(lo: f64, hi: f64) -> (f64, f64) {
    if is_flat(lo, hi) {
        let mid = (lo + hi) / 2.0;
        let pad = mid.abs().max(1.0) * 0.1;
        (mid - pad, mid + pad)
    } else {
        let pad = (hi - lo) * 0.05;
        (lo - pad, hi + pad)
    }
}

/// The x axis for points from `lo` to `hi`. A single x (a run's first step) gets one unit on
/// each side, but never below 0 when the data starts at or above it: steps and times are not
/// negative.
pub fn x_range(lo: f64, hi: f64) -> Range<f64> {
    if lo < hi {
        lo..hi
    } else if lo >= 0.0 {
        (lo - 1.0).max(0.0)..hi + 1.0
    } else {
        lo - 1.0..hi + 1.0
    }
}

/// A tick label on a linear axis `span` wide. Ticks are computed as start + i * step, so the
/// one meant to be 0 can come out as -2.78e-17: a value within a millionth of the span of 0 is
/// 0, and the rest get as many decimals as ticks about a sixth of the span apart need.
pub fn format_tick(v: f64, span: f64) -> String {
    if !(span.is_finite() && span > 0.0) {
        return format_number(v);
    }
    if v.abs() <= span * 1e-6 {
        return "0".to_owned();
    }
    let a = v.abs();
    if !(1e-3..1e5).contains(&a) || span < 1e-4 {
        return format!("{v:.2e}");
    }
    let decimals = (1.0 - (span / 6.0).log10().floor()).clamp(0.0, 6.0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// How many points of `series` a log-scale y axis leaves out (values at or below zero), so the
/// chart can say so.
pub fn non_positive_points(series: &[Series]) -> usize {
    series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| p.value.is_finite() && p.value <= 0.0)
        .count()
}

fn draw_plot<Y>(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    series: &[Prepared<'_>],
    x_range: Range<f64>,
    y_range: Y,
    opts: &ChartOptions,
    x_label: &str,
    // The linear y axis' span, for tick labels (`None` on a log axis).
    y_span: Option<f64>,
) -> Result<Vec<Hover>, ChartError>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let x_span = x_range.end - x_range.start;
    let steps = opts.x_axis == XAxis::Step;
    let x_tick = move |v: &f64| {
        // Steps are whole numbers; a tick between two steps gets no label.
        if steps && (v - v.round()).abs() > 1e-6 {
            String::new()
        } else {
            format_tick(*v, x_span)
        }
    };
    let y_tick = move |v: &f64| match y_span {
        Some(span) => format_tick(*v, span),
        None => format_number(*v),
    };
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(x_range, y_range)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(opts.y_label.as_str())
        .axis_desc_style(font(13.0))
        .label_style(font(12.0))
        .axis_style(FG.mix(0.6))
        .bold_line_style(GRID.mix(0.15))
        .light_line_style(TRANSPARENT)
        .x_labels(6)
        .y_labels(6)
        .x_label_formatter(&x_tick)
        .y_label_formatter(&y_tick)
        .draw()
        .map_err(draw_err)?;
    let mut hovers = Vec::new();
    for (i, s) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        if s.band.len() > 1 {
            // One polygon: along the upper edge, back along the lower one.
            let outline: Vec<(f64, f64)> = s
                .band
                .iter()
                .map(|b| (b.0, b.2))
                .chain(s.band.iter().rev().map(|b| (b.0, b.1)))
                .collect();
            chart
                .draw_series(std::iter::once(Polygon::new(
                    outline,
                    color.mix(0.18).filled(),
                )))
                .map_err(draw_err)?;
        }
        chart
            .draw_series(LineSeries::new(
                s.points.iter().map(|p| (p.0, p.1)),
                color.stroke_width(2),
            ))
            .map_err(draw_err)?;
        // A line needs two points; a series of one (a run's first step) is a dot instead.
        if let [only] = s.points[..] {
            chart
                .draw_series(std::iter::once(Circle::new(
                    (only.0, only.1),
                    4,
                    color.stroke_width(2),
                )))
                .map_err(draw_err)?;
        }
        let stride = s.points.len().div_ceil(MAX_HOVER_POINTS).max(1);
        for p in s.points.iter().step_by(stride) {
            let (x, y) = chart.backend_coord(&(p.0, p.1));
            let value = if (p.1 - p.2).abs() > f64::EPSILON * p.2.abs().max(1.0) {
                format!("{} (smoothed {})", format_number(p.2), format_number(p.1))
            } else {
                format_number(p.2)
            };
            hovers.push(Hover {
                x,
                y,
                class: i % PALETTE.len(),
                title: format!("{}: {} at {x_label} {}", s.name, value, format_number(p.0)),
            });
        }
    }
    Ok(hovers)
}

/// Legend rows: each entry is a 20 px swatch plus its name; names are estimated at 7 px a
/// character (the browser lays the text out, so this only decides where rows wrap).
fn legend_layout(series: &[Prepared<'_>], width: u32) -> Vec<(i32, i32)> {
    let (mut x, mut y) = (70i32, 0i32);
    let mut at = Vec::with_capacity(series.len());
    for s in series {
        let w = 36 + 7 * s.name.chars().count() as i32;
        if x + w > width as i32 && x > 70 {
            x = 70;
            y += 20;
        }
        at.push((x, y + 14));
        x += w;
    }
    at
}

fn legend_height(series: &[Prepared<'_>], width: u32) -> u32 {
    legend_layout(series, width)
        .last()
        .map_or(0, |&(_, y)| y as u32 + 10)
}

fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    series: &[Prepared<'_>],
) -> Result<(), ChartError> {
    let (width, _) = area.dim_in_pixel();
    for (i, (s, (x, y))) in series.iter().zip(legend_layout(series, width)).enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        area.draw(&PathElement::new(
            vec![(x, y), (x + 20, y)],
            color.stroke_width(3),
        ))
        .map_err(draw_err)?;
        let style = font(13.0).pos(Pos::new(HPos::Left, VPos::Center));
        area.draw(&Text::new(s.name.to_owned(), (x + 26, y), style))
            .map_err(draw_err)?;
    }
    Ok(())
}

fn min_max(it: impl Iterator<Item = f64>) -> (f64, f64) {
    it.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

/// Tick and tooltip numbers: short, no trailing zeros, scientific for very large or small.
pub fn format_number(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".to_owned()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{v:.2e}")
    } else {
        // Four decimals at most, trailing zeros dropped. Rounded first, then printed shortest:
        // the nearest double to k / 10^4 prints as exactly that decimal, and the shortest
        // printing is several times faster than `{:.4}`'s exact one (a chart page formats a
        // few thousand hover values).
        let r = (v * 1e4).round() / 1e4;
        format!("{r}")
    }
}

/// Makes the SVG themable and accessible: sentinel colours to `currentColor`, a class per
/// series colour, a `<title>`, and the hover overlay.
fn finish_svg(svg: String, opts: &ChartOptions, n_series: usize, hovers: &[Hover]) -> String {
    let mut svg = svg
        .replace("#010203", "currentColor")
        .replace("#040506", "currentColor");
    for (i, c) in PALETTE.iter().enumerate() {
        let hex = format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
        svg = svg
            .replace(
                &format!("stroke=\"{hex}\""),
                &format!("stroke=\"{hex}\" class=\"s{i}\""),
            )
            .replace(
                &format!("fill=\"{hex}\""),
                &format!("fill=\"{hex}\" class=\"b{i}\""),
            );
    }
    let label = format!(
        "{}: {} series of {} against {}{}",
        opts.title,
        n_series,
        opts.y_label,
        opts.x_axis.as_query(),
        if opts.log_y { ", log scale" } else { "" }
    );
    let mut out = String::with_capacity(svg.len() + hovers.len() * 120 + 200);
    match svg.find('>') {
        Some(end) if svg.starts_with("<svg") => {
            out.push_str(&svg[..end]);
            out.push_str(" role=\"img\" class=\"chart-plot\">");
            out.push_str(&format!("<title>{}</title>", escape_html(&label)));
            svg = svg[end + 1..].to_owned();
        }
        _ => {}
    }
    let body_end = svg.rfind("</svg>").unwrap_or(svg.len());
    out.push_str(&svg[..body_end]);
    if !hovers.is_empty() {
        out.push_str("<g class=\"chart-hover\">");
        for h in hovers {
            out.push_str(&format!(
                "<circle cx=\"{}\" cy=\"{}\" r=\"5\" class=\"s{}\"><title>{}</title></circle>",
                h.x,
                h.y,
                h.class,
                escape_html(&h.title)
            ));
        }
        out.push_str("</g>");
    }
    out.push_str(&svg[body_end..]);
    out
}

#[cfg(test)]
mod tests {
    use super::super::Point;
    use super::*;

    fn series(name: &str, values: &[f64]) -> Series {
        Series::line(
            name,
            values
                .iter()
                .enumerate()
                .map(|(i, &value)| Point {
                    step: i as f64,
                    time_s: 30.0 * i as f64,
                    value,
                })
                .collect(),
        )
    }

    /// The data lines: series-coloured polylines 2 px wide (legend swatches are 3 px, axes
    /// are `currentColor`).
    fn data_lines(svg: &str) -> Vec<&str> {
        svg.split("<polyline")
            .skip(1)
            .map(|rest| &rest[..rest.find("/>").unwrap_or(rest.len())])
            .filter(|l| l.contains("class=\"s") && l.contains("stroke-width=\"2\""))
            .collect()
    }

    fn polylines(svg: &str) -> usize {
        data_lines(svg).len()
    }

    #[test]
    fn a_band_is_one_translucent_polygon_in_its_series_colour_and_widens_the_y_range() {
        let mut s = series("mean", &[1.0, 2.0, 3.0]);
        s.band = vec![(0.5, 1.5), (1.0, 9.0), (2.5, 3.5)];
        let svg = render_line_chart(&[s.clone()], &ChartOptions::new("t", "y")).unwrap();
        assert_eq!(svg.matches("<polygon").count(), 1, "{svg}");
        assert!(svg.contains("class=\"b0\""), "{svg}");
        // The highest number among the SVG's texts is the top tick of the y axis here.
        let top_tick = |svg: &str| {
            svg.split("<text")
                .skip(1)
                .filter_map(|t| {
                    let body = &t[t.find('>')? + 1..t.find("</text>")?];
                    body.trim().parse::<f64>().ok()
                })
                .fold(f64::MIN, f64::max)
        };
        let plain = render_line_chart(
            &[series("mean", &[1.0, 2.0, 3.0])],
            &ChartOptions::new("t", "y"),
        )
        .unwrap();
        assert!(
            top_tick(&svg) >= 6.0 && top_tick(&plain) < 6.0,
            "the axis reaches the band's top: {} vs {}",
            top_tick(&svg),
            top_tick(&plain)
        );
        // A band of another length is ignored rather than misdrawn.
        s.band.pop();
        let svg = render_line_chart(&[s], &ChartOptions::new("t", "y")).unwrap();
        assert_eq!(svg.matches("<polygon").count(), 0);
    }

    #[test]
    fn a_single_point_is_drawn_as_a_dot() {
        let svg = render_line_chart(
            &[series("first step", &[0.25])],
            &ChartOptions::new("t", "y"),
        )
        .unwrap();
        let plot = &svg[..svg.find("chart-hover").unwrap_or(svg.len())];
        assert_eq!(plot.matches("<circle").count(), 1, "{svg}");
    }

    #[test]
    fn one_polyline_and_one_legend_entry_per_series() {
        let s = [
            series("regret", &[0.1, 0.3, 0.2, 0.4]),
            series("learnable share", &[0.5, 0.4, 0.45, 0.3]),
            series("acceptance", &[0.9, 0.8, 0.85, 0.95]),
        ];
        let svg = render_line_chart(&s, &ChartOptions::new("Rewards", "value")).expect("draws");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(polylines(&svg), 3, "{svg}");
        for name in ["regret", "learnable share", "acceptance"] {
            assert!(
                svg.contains(&format!(">\n{name}\n</text>")),
                "legend for {name}"
            );
        }
        assert_eq!(
            svg.matches("class=\"s2\"").count(),
            2 + 4,
            "line + swatch + 4 hovers"
        );
        assert!(svg.contains("<title>Rewards: 3 series of value against step</title>"));
        // Theming: no sentinel colour survives.
        assert!(!svg.contains("#010203") && !svg.contains("#040506"));
    }

    #[test]
    fn hover_titles_carry_the_values_and_are_escaped() {
        let s = [series("a<b", &[1.0, 2.0])];
        let svg = render_line_chart(&s, &ChartOptions::new("T", "v")).expect("draws");
        assert!(svg.contains("<title>a&lt;b: 2 at step 1</title>"), "{svg}");
        assert!(!svg.contains("a<b"));
    }

    #[test]
    fn log_scale_leaves_out_non_positive_points_and_counts_them() {
        let s = [
            series("ok", &[1.0, 2.0]),
            series("regret", &[0.5, 0.0, 0.2, -1.0]),
        ];
        let opts = ChartOptions {
            log_y: true,
            ..ChartOptions::new("T", "v")
        };
        // The chart is drawn from the positive points; the two others are counted for the note.
        let svg = render_line_chart(&s, &opts).expect("draws the positive points");
        assert_eq!(polylines(&svg), 2, "{svg}");
        assert_eq!(svg.matches("<title>regret:").count(), 2, "0.5 and 0.2 only");
        assert_eq!(non_positive_points(&s), 2);
        assert!(svg.contains("log scale"));
        // Nothing above zero: a message instead of an empty chart.
        let err = render_line_chart(&[series("zero", &[0.0, 0.0])], &opts)
            .expect_err("nothing to draw on a log axis");
        assert_eq!(err, ChartError::NothingPositiveForLog);
        assert!(err.to_string().contains("switch log scale off"), "{err}");
        // Positive data draws on a log axis, and nothing is left out.
        let loss = [series("loss", &[100.0, 10.0, 1.0, 0.1])];
        let svg = render_line_chart(&loss, &opts).expect("draws");
        assert_eq!(polylines(&svg), 1);
        assert_eq!(non_positive_points(&loss), 0);
    }

    /// The numbers printed along the y axis.
    fn y_ticks(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter(|t| t.contains("text-anchor=\"end\""))
            .filter_map(|t| Some(t[t.find('>')? + 1..t.find("</text>")?].trim().to_owned()))
            .collect()
    }

    #[test]
    fn a_flat_series_gets_a_padded_axis_with_distinct_ticks() {
        // 1 and 1.0000000000000002 are one value: not stretched to the full height.
        assert!(is_flat(1.0, 1.000_000_000_000_000_2));
        let (lo, hi) = y_range(1.0, 1.000_000_000_000_000_2);
        assert!(
            (lo - 0.9).abs() < 1e-12 && (hi - 1.1).abs() < 1e-12,
            "{lo}..{hi}"
        );
        assert_eq!(y_range(0.0, 0.0), (-0.1, 0.1));
        assert_eq!(y_range(-50.0, -50.0), (-55.0, -45.0));
        let (lo, hi) = y_range(0.0, 1.0);
        assert!((lo + 0.05).abs() < 1e-12 && (hi - 1.05).abs() < 1e-12);
        let svg = render_line_chart(
            &[series("acceptance", &[1.0, 1.000_000_000_000_000_2, 1.0])],
            &ChartOptions::new("T", "v"),
        )
        .expect("draws");
        let ticks = y_ticks(&svg);
        assert!(ticks.len() >= 3, "{ticks:?}");
        let distinct: std::collections::BTreeSet<&String> = ticks.iter().collect();
        assert_eq!(
            distinct.len(),
            ticks.len(),
            "two ticks with one label: {ticks:?}"
        );
        assert!(ticks.iter().any(|t| t == "1"), "{ticks:?}");
    }

    #[test]
    fn ticks_are_rounded_to_the_axis_and_zero_is_zero() {
        assert_eq!(format_tick(-2.78e-17, 0.2), "0");
        assert_eq!(format_tick(2.78e-17, 1.0), "0");
        assert_eq!(format_tick(0.1 + 0.2, 1.0), "0.3");
        assert_eq!(format_tick(0.05, 0.2), "0.05");
        assert_eq!(format_tick(1.0, 0.2), "1");
        assert_eq!(format_tick(1500.0, 3000.0), "1500");
        assert_eq!(format_tick(123456.0, 1e6), "1.23e5");
        // A smoothed curve around zero: no -2.78e-17 among the labels.
        let s = [series("smoothed", &[-0.1, 0.1, -0.1, 0.1, -0.1, 0.1])];
        let opts = ChartOptions {
            smoothing: 0.5,
            ..ChartOptions::new("T", "v")
        };
        let svg = render_line_chart(&s, &opts).expect("draws");
        let ticks = y_ticks(&svg);
        assert!(ticks.iter().all(|t| !t.contains('e')), "{ticks:?}");
    }

    #[test]
    fn a_single_point_gets_an_x_axis_that_does_not_go_below_zero() {
        assert_eq!(x_range(0.0, 0.0), 0.0..1.0);
        assert_eq!(x_range(5.0, 5.0), 4.0..6.0);
        assert_eq!(x_range(-3.0, -3.0), -4.0..-2.0);
        assert_eq!(x_range(1.0, 6.0), 1.0..6.0);
        let svg = render_line_chart(&[series("first", &[0.5])], &ChartOptions::new("T", "v"))
            .expect("draws");
        assert!(
            !svg.contains(">\n-1\n<"),
            "a negative step on the axis: {svg}"
        );
    }

    #[test]
    fn steps_can_be_counted_from_one_like_progress_and_the_log() {
        // Metric step 0 is the first step the run completed: progress and log call it 1.
        let opts = ChartOptions {
            step_offset: 1.0,
            ..ChartOptions::new("T", "v")
        };
        let svg = render_line_chart(&[series("r", &[1.0, 2.0])], &opts).expect("draws");
        assert!(svg.contains("<title>r: 1 at step 1</title>"), "{svg}");
        assert!(svg.contains("<title>r: 2 at step 2</title>"), "{svg}");
    }

    #[test]
    fn smoothing_keeps_every_point_and_changes_the_line() {
        let raw = [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0];
        let s = [series("noisy", &raw)];
        let plain = render_line_chart(&s, &ChartOptions::new("T", "v")).expect("draws");
        let opts = ChartOptions {
            smoothing: 0.8,
            ..ChartOptions::new("T", "v")
        };
        let smooth = render_line_chart(&s, &opts).expect("draws");
        let nth_points = |svg: &str| -> Vec<String> {
            let lines = data_lines(svg);
            assert_eq!(lines.len(), 1);
            let line = lines[0];
            let p = line.find("points=\"").map_or(0, |i| i + 8);
            let end = line[p..].find('"').map_or(line.len(), |i| p + i);
            line[p..end].split_whitespace().map(str::to_owned).collect()
        };
        assert_eq!(nth_points(&plain).len(), raw.len());
        assert_eq!(nth_points(&smooth).len(), raw.len());
        assert_ne!(nth_points(&plain), nth_points(&smooth));
        assert!(
            smooth.contains("(smoothed "),
            "tooltips show raw and smoothed values"
        );
    }

    #[test]
    fn time_axis_picks_a_unit_and_bad_options_are_refused() {
        let s = [series("r", &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])];
        let opts = ChartOptions {
            x_axis: XAxis::Time,
            ..ChartOptions::new("T", "v")
        };
        let svg = render_line_chart(&s, &opts).expect("draws");
        assert!(svg.contains("time (min)"), "150 s spans minutes");
        let bad = ChartOptions {
            smoothing: 1.0,
            ..ChartOptions::new("T", "v")
        };
        assert_eq!(render_line_chart(&s, &bad), Err(ChartError::Smoothing(1.0)));
        let tiny = ChartOptions {
            width: 50,
            ..ChartOptions::new("T", "v")
        };
        assert!(matches!(
            render_line_chart(&s, &tiny),
            Err(ChartError::Size { .. })
        ));
    }

    #[test]
    fn empty_and_non_finite_data_say_so_instead_of_failing() {
        let svg = render_line_chart(&[], &ChartOptions::new("T", "v")).expect("draws");
        assert!(svg.contains("No data yet"));
        let svg = render_line_chart(&[series("nan", &[f64::NAN])], &ChartOptions::new("T", "v"))
            .expect("draws");
        assert!(svg.contains("No data yet"));
        let svg = render_line_chart(
            &[series("one", &[f64::NAN, 3.0])],
            &ChartOptions::new("T", "v"),
        )
        .expect("draws");
        assert_eq!(polylines(&svg), 1);
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(format_number(0.0), "0");
        assert_eq!(format_number(0.25), "0.25");
        assert_eq!(format_number(1200.0), "1200");
        assert_eq!(format_number(1.0e-5), "1.00e-5");
        assert_eq!(format_number(123456.0), "1.23e5");
        assert_eq!(format_number(-0.3), "-0.3");
        assert_eq!(format_number(0.1 + 0.2), "0.3");
        assert_eq!(format_number(2.0 / 3.0), "0.6667");
        assert_eq!(format_number(99_999.999_96), "100000");
        assert_eq!(format_number(0.001), "0.001");
        assert_eq!(format_number(12.5), "12.5");
    }
}
