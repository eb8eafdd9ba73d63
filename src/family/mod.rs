pub mod gemini;
