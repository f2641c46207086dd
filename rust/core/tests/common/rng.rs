//! xorshift64*: deterministic pseudo-random numbers without a dependency, for the tests that
//! generate inputs (the encoder's unit tests and the fuzz harness include this file by path).

pub struct Rng(pub u64);

#[allow(dead_code)] // each test that includes this uses its own part of it
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}
