;; gpt.js's matmul in WebAssembly SIMD: rows t0..t1-1 of out (T, nOut) = X (T, nIn) W^T + b, for
;; W (nOut, nIn) row-major as nn.Linear stores it, every array float32 in the page's one memory and
;; every pointer a byte offset into it. Four rows of W by two positions at a time: eight sums of four
;; lanes each run side by side, each row of W is read once for two positions, and a sum's four lanes
;; are added at its end (float32 sums, where the JavaScript matmul sums in float64: the numbers agree
;; to float32's last bits). nOut and nIn must be multiples of 4; gpt.js uses its own loop otherwise.
;; Built into gpt.js's MATMUL_WASM by scripts/wasm_kernel.py (tests/test_explain.py checks they match).
(module
  (import "env" "memory" (memory 1))

  (func $sum (param $v v128) (result f32)
    (f32.add
      (f32.add (f32x4.extract_lane 0 (local.get $v)) (f32x4.extract_lane 1 (local.get $v)))
      (f32.add (f32x4.extract_lane 2 (local.get $v)) (f32x4.extract_lane 3 (local.get $v)))))

  (func (export "matmul")
    (param $W i32) (param $b i32) (param $hasBias i32) (param $X i32) (param $out i32)
    (param $t0 i32) (param $t1 i32) (param $nOut i32) (param $nIn i32)
    (local $o i32) (local $t i32) (local $i i32) (local $row i32) (local $outRow i32)
    (local $w0 i32) (local $w1 i32) (local $w2 i32) (local $w3 i32) (local $xa i32) (local $xb i32)
    (local $oa i32) (local $ob i32)
    (local $b0 f32) (local $b1 f32) (local $b2 f32) (local $b3 f32)
    (local $a0 v128) (local $a1 v128) (local $a2 v128) (local $a3 v128)
    (local $c0 v128) (local $c1 v128) (local $c2 v128) (local $c3 v128)
    (local $u v128) (local $v v128) (local $w v128)
    (local.set $row (i32.shl (local.get $nIn) (i32.const 2)))  ;; bytes of a row of W or X
    (local.set $outRow (i32.shl (local.get $nOut) (i32.const 2)))  ;; bytes of a row of out
    (local.set $o (i32.const 0))
    (block $rowsDone
      (loop $rows
        (br_if $rowsDone (i32.ge_u (local.get $o) (local.get $nOut)))
        ;; rows o..o+3 of W, and their biases
        (local.set $w0 (i32.add (local.get $W) (i32.mul (local.get $o) (local.get $row))))
        (local.set $w1 (i32.add (local.get $w0) (local.get $row)))
        (local.set $w2 (i32.add (local.get $w1) (local.get $row)))
        (local.set $w3 (i32.add (local.get $w2) (local.get $row)))
        (local.set $b0 (f32.const 0))
        (local.set $b1 (f32.const 0))
        (local.set $b2 (f32.const 0))
        (local.set $b3 (f32.const 0))
        (if (local.get $hasBias)
          (then
            (local.set $u (v128.load (i32.add (local.get $b) (i32.shl (local.get $o) (i32.const 2)))))
            (local.set $b0 (f32x4.extract_lane 0 (local.get $u)))
            (local.set $b1 (f32x4.extract_lane 1 (local.get $u)))
            (local.set $b2 (f32x4.extract_lane 2 (local.get $u)))
            (local.set $b3 (f32x4.extract_lane 3 (local.get $u)))))
        ;; positions t and t + 1
        (local.set $t (local.get $t0))
        (block $pairsDone
          (loop $pairs
            (br_if $pairsDone (i32.ge_u (i32.add (local.get $t) (i32.const 1)) (local.get $t1)))
            (local.set $xa (i32.add (local.get $X) (i32.mul (local.get $t) (local.get $row))))
            (local.set $xb (i32.add (local.get $xa) (local.get $row)))
            (local.set $a0 (v128.const f32x4 0 0 0 0))
            (local.set $a1 (v128.const f32x4 0 0 0 0))
            (local.set $a2 (v128.const f32x4 0 0 0 0))
            (local.set $a3 (v128.const f32x4 0 0 0 0))
            (local.set $c0 (v128.const f32x4 0 0 0 0))
            (local.set $c1 (v128.const f32x4 0 0 0 0))
            (local.set $c2 (v128.const f32x4 0 0 0 0))
            (local.set $c3 (v128.const f32x4 0 0 0 0))
            (local.set $i (i32.const 0))
            (block $sumDone
              (loop $sum4
                (br_if $sumDone (i32.ge_u (local.get $i) (local.get $row)))
                (local.set $u (v128.load (i32.add (local.get $xa) (local.get $i))))
                (local.set $v (v128.load (i32.add (local.get $xb) (local.get $i))))
                (local.set $w (v128.load (i32.add (local.get $w0) (local.get $i))))
                (local.set $a0 (f32x4.add (local.get $a0) (f32x4.mul (local.get $w) (local.get $u))))
                (local.set $c0 (f32x4.add (local.get $c0) (f32x4.mul (local.get $w) (local.get $v))))
                (local.set $w (v128.load (i32.add (local.get $w1) (local.get $i))))
                (local.set $a1 (f32x4.add (local.get $a1) (f32x4.mul (local.get $w) (local.get $u))))
                (local.set $c1 (f32x4.add (local.get $c1) (f32x4.mul (local.get $w) (local.get $v))))
                (local.set $w (v128.load (i32.add (local.get $w2) (local.get $i))))
                (local.set $a2 (f32x4.add (local.get $a2) (f32x4.mul (local.get $w) (local.get $u))))
                (local.set $c2 (f32x4.add (local.get $c2) (f32x4.mul (local.get $w) (local.get $v))))
                (local.set $w (v128.load (i32.add (local.get $w3) (local.get $i))))
                (local.set $a3 (f32x4.add (local.get $a3) (f32x4.mul (local.get $w) (local.get $u))))
                (local.set $c3 (f32x4.add (local.get $c3) (f32x4.mul (local.get $w) (local.get $v))))
                (local.set $i (i32.add (local.get $i) (i32.const 16)))
                (br $sum4)))
            (local.set $oa
              (i32.add (local.get $out)
                (i32.add (i32.mul (local.get $t) (local.get $outRow)) (i32.shl (local.get $o) (i32.const 2)))))
            (local.set $ob (i32.add (local.get $oa) (local.get $outRow)))
            (f32.store offset=0 (local.get $oa) (f32.add (call $sum (local.get $a0)) (local.get $b0)))
            (f32.store offset=4 (local.get $oa) (f32.add (call $sum (local.get $a1)) (local.get $b1)))
            (f32.store offset=8 (local.get $oa) (f32.add (call $sum (local.get $a2)) (local.get $b2)))
            (f32.store offset=12 (local.get $oa) (f32.add (call $sum (local.get $a3)) (local.get $b3)))
            (f32.store offset=0 (local.get $ob) (f32.add (call $sum (local.get $c0)) (local.get $b0)))
            (f32.store offset=4 (local.get $ob) (f32.add (call $sum (local.get $c1)) (local.get $b1)))
            (f32.store offset=8 (local.get $ob) (f32.add (call $sum (local.get $c2)) (local.get $b2)))
            (f32.store offset=12 (local.get $ob) (f32.add (call $sum (local.get $c3)) (local.get $b3)))
            (local.set $t (i32.add (local.get $t) (i32.const 2)))
            (br $pairs)))
        ;; the last position of an odd count
        (if (i32.lt_u (local.get $t) (local.get $t1))
          (then
            (local.set $xa (i32.add (local.get $X) (i32.mul (local.get $t) (local.get $row))))
            (local.set $a0 (v128.const f32x4 0 0 0 0))
            (local.set $a1 (v128.const f32x4 0 0 0 0))
            (local.set $a2 (v128.const f32x4 0 0 0 0))
            (local.set $a3 (v128.const f32x4 0 0 0 0))
            (local.set $i (i32.const 0))
            (block $tailDone
              (loop $tail
                (br_if $tailDone (i32.ge_u (local.get $i) (local.get $row)))
                (local.set $u (v128.load (i32.add (local.get $xa) (local.get $i))))
                (local.set $a0
                  (f32x4.add (local.get $a0) (f32x4.mul (v128.load (i32.add (local.get $w0) (local.get $i))) (local.get $u))))
                (local.set $a1
                  (f32x4.add (local.get $a1) (f32x4.mul (v128.load (i32.add (local.get $w1) (local.get $i))) (local.get $u))))
                (local.set $a2
                  (f32x4.add (local.get $a2) (f32x4.mul (v128.load (i32.add (local.get $w2) (local.get $i))) (local.get $u))))
                (local.set $a3
                  (f32x4.add (local.get $a3) (f32x4.mul (v128.load (i32.add (local.get $w3) (local.get $i))) (local.get $u))))
                (local.set $i (i32.add (local.get $i) (i32.const 16)))
                (br $tail)))
            (local.set $oa
              (i32.add (local.get $out)
                (i32.add (i32.mul (local.get $t) (local.get $outRow)) (i32.shl (local.get $o) (i32.const 2)))))
            (f32.store offset=0 (local.get $oa) (f32.add (call $sum (local.get $a0)) (local.get $b0)))
            (f32.store offset=4 (local.get $oa) (f32.add (call $sum (local.get $a1)) (local.get $b1)))
            (f32.store offset=8 (local.get $oa) (f32.add (call $sum (local.get $a2)) (local.get $b2)))
            (f32.store offset=12 (local.get $oa) (f32.add (call $sum (local.get $a3)) (local.get $b3)))))
        (local.set $o (i32.add (local.get $o) (i32.const 4)))
        (br $rows)))))
