//! Largest-Triangle-Three-Buckets downsampling (Steinarsson, "Downsampling Time Series for
//! Visual Representation", 2013). It keeps the first and last points and, from each of
//! `n - 2` equal buckets in between, the point that spans the largest triangle with the point
//! kept before it and the average of the next bucket. Peaks and dips survive, so a 1M-point
//! curve drawn from 1,000 points keeps its shape, unlike taking every k-th point or averaging.

/// Fewest output points LTTB can produce (first, last and one in between).
pub const MIN_POINTS: usize = 3;

/// Picks at most `n` of `points` (ordered by x). Returns all of them when `n >= len` or
/// `n < MIN_POINTS` would not help (then the first and last are returned for n = 2, the
/// first for n = 1, none for n = 0).
pub fn lttb<T: Copy>(points: &[T], n: usize, xy: impl Fn(&T) -> (f64, f64)) -> Vec<T> {
    let len = points.len();
    if n >= len {
        return points.to_vec();
    }
    match n {
        0 => return Vec::new(),
        1 => return points.first().copied().into_iter().collect(),
        2 => {
            return [points.first(), points.last()]
                .into_iter()
                .flatten()
                .copied()
                .collect();
        }
        _ => {}
    }
    let mut out = Vec::with_capacity(n);
    out.push(points[0]);
    // Buckets cover points[1..len-1]; bucket i is [start(i), start(i+1)).
    let every = (len - 2) as f64 / (n - 2) as f64;
    let start = |i: usize| ((i as f64 * every) as usize + 1).min(len - 1);
    let mut a = 0usize;
    for i in 0..n - 2 {
        let (lo, hi) = (start(i), start(i + 1).max(start(i) + 1).min(len - 1));
        // Average of the next bucket (the last point for the final bucket).
        let (nlo, nhi) = if i + 2 < n - 1 {
            (
                start(i + 1),
                start(i + 2).max(start(i + 1) + 1).min(len - 1),
            )
        } else {
            (len - 1, len)
        };
        let cnt = (nhi - nlo).max(1) as f64;
        let (mut avg_x, mut avg_y) = (0.0, 0.0);
        for p in &points[nlo..nhi] {
            let (x, y) = xy(p);
            avg_x += x;
            avg_y += y;
        }
        avg_x /= cnt;
        avg_y /= cnt;
        let (ax, ay) = xy(&points[a]);
        let mut best = lo;
        let mut best_area = -1.0;
        for (j, p) in points.iter().enumerate().take(hi).skip(lo) {
            let (x, y) = xy(p);
            let area = ((ax - avg_x) * (y - ay) - (ax - x) * (avg_y - ay)).abs();
            if area > best_area {
                best_area = area;
                best = j;
            }
        }
        out.push(points[best]);
        a = best;
    }
    out.push(points[len - 1]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xy(p: &(f64, f64)) -> (f64, f64) {
        *p
    }

    #[test]
    fn keeps_endpoints_and_extremes() {
        // A noisy sine with one spike up and one down in the middle of the run.
        let mut pts: Vec<(f64, f64)> = (0..10_000)
            .map(|i| (i as f64, (i as f64 / 500.0).sin()))
            .collect();
        pts[3_333].1 = 50.0;
        pts[6_666].1 = -40.0;
        let out = lttb(&pts, 100, xy);
        assert_eq!(out.len(), 100);
        assert_eq!(out.first(), pts.first());
        assert_eq!(out.last(), pts.last());
        assert!(out.contains(&pts[3_333]), "the maximum must survive");
        assert!(out.contains(&pts[6_666]), "the minimum must survive");
        assert!(
            out.windows(2).all(|w| w[0].0 < w[1].0),
            "x stays strictly increasing"
        );
    }

    #[test]
    fn small_inputs_and_small_n() {
        let pts: Vec<(f64, f64)> = (0..5).map(|i| (i as f64, i as f64)).collect();
        assert_eq!(lttb(&pts, 10, xy), pts);
        assert_eq!(lttb(&pts, 2, xy), vec![pts[0], pts[4]]);
        assert_eq!(lttb(&pts, 1, xy), vec![pts[0]]);
        assert!(lttb(&pts, 0, xy).is_empty());
        assert_eq!(lttb(&pts, 3, xy).len(), 3);
        assert!(lttb::<(f64, f64)>(&[], 3, xy).is_empty());
    }
}
