//! In-process image work for `screenshot`: PNG decode, crop, resample and PNG/JPEG encode,
//! so region, scale, the long-edge cap and JPEG do not depend on what the grabber can do
//! (Debian's `grim` cannot write JPEG).

use std::io::Cursor;

/// Decoder allocation cap (bytes): an 8K RGBA frame is ~130 MiB.
const DECODE_LIMIT_BYTES: usize = 512 << 20;
/// JPEG quality (1–100): small enough for a model's context, sharp enough for text.
pub const JPEG_QUALITY: u8 = 80;

/// An 8-bit RGB raster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rgb {
    pub width: u32,
    pub height: u32,
    pub data: Vec<u8>,
}

/// Width and height from a PNG's IHDR, without decoding.
pub fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    if bytes.len() < 24 || bytes[..8] != SIGNATURE || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let w = u32::from_be_bytes(bytes[16..20].try_into().ok()?);
    let h = u32::from_be_bytes(bytes[20..24].try_into().ok()?);
    (w > 0 && h > 0).then_some((w, h))
}

pub fn decode_png(bytes: &[u8]) -> Result<Rgb, String> {
    let mut decoder = png::Decoder::new_with_limits(
        Cursor::new(bytes),
        png::Limits {
            bytes: DECODE_LIMIT_BYTES,
        },
    );
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder
        .read_info()
        .map_err(|e| format!("the grabber's PNG is unreadable: {e}"))?;
    let size = reader
        .output_buffer_size()
        .ok_or("the grabber's PNG is too large to decode")?;
    let mut buf = vec![0; size];
    let info = reader
        .next_frame(&mut buf)
        .map_err(|e| format!("the grabber's PNG is unreadable: {e}"))?;
    buf.truncate(info.buffer_size());
    let pixels = (info.width as usize) * (info.height as usize);
    let data = match info.color_type {
        png::ColorType::Rgb => buf,
        png::ColorType::Rgba => buf
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
        png::ColorType::Grayscale => buf.iter().flat_map(|g| [*g, *g, *g]).collect(),
        png::ColorType::GrayscaleAlpha => buf
            .chunks_exact(2)
            .flat_map(|p| [p[0], p[0], p[0]])
            .collect(),
        png::ColorType::Indexed => return Err("the grabber's PNG kept a palette".into()),
    };
    if data.len() != pixels * 3 {
        return Err("the grabber's PNG has an unexpected layout".into());
    }
    Ok(Rgb {
        width: info.width,
        height: info.height,
        data,
    })
}

impl Rgb {
    /// The sub-rectangle at (x, y); the caller has checked it lies inside.
    pub fn crop(&self, x: u32, y: u32, width: u32, height: u32) -> Rgb {
        let stride = self.width as usize * 3;
        let mut data = Vec::with_capacity(width as usize * height as usize * 3);
        for row in y..y + height {
            let start = row as usize * stride + x as usize * 3;
            data.extend_from_slice(&self.data[start..start + width as usize * 3]);
        }
        Rgb {
            width,
            height,
            data,
        }
    }

    /// Shrink by a whole factor `k`, each output pixel the mean of a `k`×`k` block (the
    /// right and bottom edges that do not fill a block are left out). Integer sums only: a
    /// quick first step of a large shrink, as a thumbnail's, before [`Rgb::resize`].
    pub fn shrink_box(&self, k: u32) -> Rgb {
        if k <= 1 {
            return self.clone();
        }
        let (w, h) = ((self.width / k).max(1), (self.height / k).max(1));
        let (k, sw) = (k as usize, self.width as usize);
        let mut sums = vec![0u32; w as usize * 3];
        let mut data = Vec::with_capacity(w as usize * h as usize * 3);
        let area = (k * k) as u32;
        for by in 0..h as usize {
            sums.iter_mut().for_each(|v| *v = 0);
            for y in by * k..((by + 1) * k).min(self.height as usize) {
                let row = &self.data[y * sw * 3..(y + 1) * sw * 3];
                for (bx, sum) in sums.chunks_exact_mut(3).enumerate() {
                    for px in row[bx * k * 3..(bx + 1) * k * 3].chunks_exact(3) {
                        sum[0] += u32::from(px[0]);
                        sum[1] += u32::from(px[1]);
                        sum[2] += u32::from(px[2]);
                    }
                }
            }
            data.extend(sums.iter().map(|v| ((v + area / 2) / area) as u8));
        }
        Rgb {
            width: w,
            height: h,
            data,
        }
    }

    /// Resample to `width`×`height` with a triangle filter whose support widens when
    /// shrinking, so downscaled text averages instead of aliasing.
    pub fn resize(&self, width: u32, height: u32) -> Rgb {
        if width == self.width && height == self.height {
            return self.clone();
        }
        let horizontal = weights(self.width, width);
        let vertical = weights(self.height, height);
        // Horizontal pass: self.height rows of `width` pixels.
        let mut tmp = vec![0f32; width as usize * self.height as usize * 3];
        for y in 0..self.height as usize {
            let src = &self.data[y * self.width as usize * 3..(y + 1) * self.width as usize * 3];
            for (x, taps) in horizontal.iter().enumerate() {
                let mut acc = [0f32; 3];
                for &(i, w) in taps {
                    for c in 0..3 {
                        acc[c] += f32::from(src[i * 3 + c]) * w;
                    }
                }
                let o = (y * width as usize + x) * 3;
                tmp[o..o + 3].copy_from_slice(&acc);
            }
        }
        let mut data = vec![0u8; width as usize * height as usize * 3];
        let row = width as usize * 3;
        for (y, taps) in vertical.iter().enumerate() {
            for x in 0..row {
                let mut acc = 0f32;
                for &(i, w) in taps {
                    acc += tmp[i * row + x] * w;
                }
                data[y * row + x] = acc.round().clamp(0.0, 255.0) as u8;
            }
        }
        Rgb {
            width,
            height,
            data,
        }
    }

    pub fn encode_png(&self) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, self.width, self.height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Fast);
        let mut writer = encoder
            .write_header()
            .map_err(|e| format!("PNG encoding failed: {e}"))?;
        writer
            .write_image_data(&self.data)
            .map_err(|e| format!("PNG encoding failed: {e}"))?;
        writer
            .finish()
            .map_err(|e| format!("PNG encoding failed: {e}"))?;
        Ok(out)
    }

    pub fn encode_jpeg(&self) -> Result<Vec<u8>, String> {
        let (Ok(w), Ok(h)) = (u16::try_from(self.width), u16::try_from(self.height)) else {
            return Err(format!(
                "JPEG cannot hold {}x{} pixels (max 65535 per side)",
                self.width, self.height
            ));
        };
        let mut out = Vec::new();
        jpeg_encoder::Encoder::new(&mut out, JPEG_QUALITY)
            .encode(&self.data, w, h, jpeg_encoder::ColorType::Rgb)
            .map_err(|e| format!("JPEG encoding failed: {e}"))?;
        Ok(out)
    }
}

/// For each destination index, the source indices and normalised weights that feed it.
fn weights(src: u32, dst: u32) -> Vec<Vec<(usize, f32)>> {
    let ratio = f64::from(dst) / f64::from(src);
    let support = if ratio < 1.0 { 1.0 / ratio } else { 1.0 };
    (0..dst)
        .map(|d| {
            let center = (f64::from(d) + 0.5) / ratio - 0.5;
            let lo = (center - support).floor().max(0.0) as usize;
            let hi = ((center + support).ceil() as usize).min(src as usize - 1);
            let mut taps: Vec<(usize, f32)> = (lo..=hi)
                .filter_map(|i| {
                    let w = 1.0 - ((i as f64 - center).abs() / support);
                    (w > 0.0).then_some((i, w as f32))
                })
                .collect();
            if taps.is_empty() {
                taps.push((center.round().clamp(0.0, f64::from(src - 1)) as usize, 1.0));
            }
            let sum: f32 = taps.iter().map(|t| t.1).sum();
            for t in &mut taps {
                t.1 /= sum;
            }
            taps
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrink_box_averages_whole_blocks() {
        let img = Rgb {
            width: 5,
            height: 2,
            data: (0..30).map(|i| (i * 8) as u8).collect(),
        };
        let out = img.shrink_box(2);
        assert_eq!((out.width, out.height), (2, 1));
        // Block (0,0): pixels 0, 1 of row 0 and 5, 6 of row 1, channel 0: 0, 24, 120, 144.
        assert_eq!(out.data[0], 72);
        assert_eq!(out.data.len(), 6);
        assert_eq!(img.shrink_box(1).data, img.data);
    }

    fn checker(width: u32, height: u32) -> Rgb {
        let mut data = Vec::new();
        for y in 0..height {
            for x in 0..width {
                let v = if (x + y) % 2 == 0 { 255 } else { 0 };
                data.extend_from_slice(&[v, x as u8, y as u8]);
            }
        }
        Rgb {
            width,
            height,
            data,
        }
    }

    #[test]
    fn png_round_trip_and_ihdr() {
        let img = checker(7, 5);
        let bytes = img.encode_png().unwrap();
        assert_eq!(png_size(&bytes), Some((7, 5)));
        assert_eq!(decode_png(&bytes).unwrap(), img);
        assert_eq!(png_size(b"not a png at all, really not"), None);
        assert!(decode_png(b"\x89PNG\r\n\x1a\n garbage").is_err());
    }

    #[test]
    fn crop_takes_the_right_pixels() {
        let img = checker(10, 10);
        let c = img.crop(3, 4, 2, 3);
        assert_eq!((c.width, c.height), (2, 3));
        assert_eq!(&c.data[..3], &[0, 3, 4]); // (3+4) odd → black, x=3, y=4
        assert_eq!(&c.data[c.data.len() - 3..], &[255, 4, 6]);
    }

    #[test]
    fn resize_averages_when_shrinking_and_keeps_flat_colour() {
        let half = checker(8, 8).resize(4, 4);
        assert_eq!((half.width, half.height), (4, 4));
        for p in half.data.chunks_exact(3) {
            assert!(
                (110..=145).contains(&p[0]),
                "checker should average to grey: {p:?}"
            );
        }
        let flat = Rgb {
            width: 3,
            height: 2,
            data: [10u8, 20, 30].repeat(6),
        };
        let up = flat.resize(6, 4);
        assert!(up.data.chunks_exact(3).all(|p| p == [10, 20, 30]));
    }

    #[test]
    fn jpeg_has_markers() {
        let bytes = checker(16, 16).encode_jpeg().unwrap();
        assert_eq!(&bytes[..2], &[0xff, 0xd8]);
        assert_eq!(&bytes[bytes.len() - 2..], &[0xff, 0xd9]);
    }
}
