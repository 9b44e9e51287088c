"""Compute-equivalent multipliers (resnorm/results/v5/compute_equiv.py): recovered exactly from a known power law, the
placement's own FLOPs charged to it, the paired-seed bootstrap's coverage and its use of the pairing, failed runs
counted at their stated worst value."""
import numpy as np
import pytest

from resnorm.results.v5 import compute_equiv

C_K = np.array([1e12, 2.2e12, 4.5e12, 9e12])          # a ladder spanning 9x in compute


def _law(c, a=1.891, b=0.057):
  return a * np.asarray(c) ** -b


def test_a_known_multiplier_is_recovered_at_every_size():
  """The placement reaches at C what Pre-Norm reaches at 1.25 C (and with 10% more FLOPs of its own, 1.25 / 1.1)."""
  pre = np.repeat(_law(C_K)[:, None], 5, axis=1)
  place = np.repeat(_law(1.25 * C_K)[:, None], 5, axis=1)
  m = compute_equiv.multiplier(pre, place, C_K, C_K, resamples=50)
  np.testing.assert_allclose(m.per_size, 1.25, rtol=1e-9)
  assert m.value == pytest.approx(1.25, rel=1e-9) and m.lo == pytest.approx(1.25) and m.hi == pytest.approx(1.25)
  assert m.extrapolation == pytest.approx(1.25)  # its top size's loss: Pre-Norm's at 1.25x the ladder's top
  costly = compute_equiv.multiplier(pre, place, C_K, 1.1 * C_K, resamples=50)
  assert costly.value == pytest.approx(1.25 / 1.1, rel=1e-9)
  fit = compute_equiv.fit_power_law(C_K, _law(C_K))
  assert (fit.a, fit.b) == (pytest.approx(1.891), pytest.approx(0.057))
  assert compute_equiv.inside(m.value, m) and not compute_equiv.inside(1.8, m)
  assert [compute_equiv.side(v, m) for v in (m.value, 1.8, 1.1)] == ["inside", "above", "below"]


def _ladder(rng, seeds, true_m, shared_sd=0.02, own_sd=0.004):
  """Losses [K, seeds]: a seed's offset (its base weights) shared by Pre-Norm and the placement, plus noise."""
  u = rng.normal(0, shared_sd, (1, seeds))
  pre = _law(C_K)[:, None] + u + rng.normal(0, own_sd, (len(C_K), seeds))
  place = _law(true_m * C_K)[:, None] + u + rng.normal(0, own_sd, (len(C_K), seeds))
  return pre, place


def test_the_paired_bootstrap_covers_the_true_multiplier():
  """Over 60 simulated ladders of 8 paired seeds, the 95% interval holds the true 1.8x at least 80% of the time (a
  percentile bootstrap over few seeds covers less than its level)."""
  rng = np.random.default_rng(0)
  hits = 0
  for i in range(60):
    pre, place = _ladder(rng, 8, 1.8)
    m = compute_equiv.multiplier(pre, place, C_K, C_K, resamples=300, seed=i)
    hits += m.lo <= 1.8 <= m.hi
  assert hits >= 48, hits


def test_the_interval_uses_the_pairing():
  """With large shared seed offsets, pairing seed s with seed s cancels them; pairing the placement's seeds with
  other seeds' Pre-Norm runs does not, and the interval widens."""
  rng = np.random.default_rng(1)
  pre, place = _ladder(rng, 8, 1.5, shared_sd=0.05, own_sd=0.002)
  paired = compute_equiv.multiplier(pre, place, C_K, C_K, resamples=500)
  unpaired = compute_equiv.multiplier(pre, place[:, ::-1], C_K, C_K, resamples=500)
  assert np.log(paired.hi / paired.lo) < 0.5 * np.log(unpaired.hi / unpaired.lo)


def test_a_failed_run_counts_at_its_stated_worst_value():
  pre = np.repeat(_law(C_K)[:, None], 4, axis=1)
  place = np.repeat(_law(1.25 * C_K)[:, None], 4, axis=1)
  place[1, 2] = np.nan
  with pytest.raises(ValueError, match="needs `fill`"):
    compute_equiv.multiplier(pre, place, C_K, C_K)
  m = compute_equiv.multiplier(pre, place, C_K, C_K, fill=5.5, resamples=50)
  assert m.per_size[1] < 0.5 and m.per_size[0] == pytest.approx(1.25)


def test_no_multiplier_when_pre_norm_does_not_improve_with_compute():
  pre = np.repeat(_law(C_K)[::-1, None], 3, axis=1)
  with pytest.raises(ValueError, match="does not fall with compute"):
    compute_equiv.multiplier(pre, pre, C_K, C_K)
  assert compute_equiv.fit_power_law(C_K, _law(C_K)[::-1]) is None


def test_extrapolation_counts_only_beyond_pre_norms_compute_range():
  """A placement whose seed means Pre-Norm reaches within its ladder's compute range is read inside the fit; one worse
  than Pre-Norm's smallest is read below it, by the factor it lies outside."""
  pre = np.repeat(_law(C_K)[:, None], 3, axis=1)
  inner = np.repeat(_law(C_K * np.array([1.5, 1.5, 1.5, 1.0]))[:, None], 3, axis=1)
  assert compute_equiv.multiplier(pre, inner, C_K, C_K, resamples=20).extrapolation == pytest.approx(1.0)
  above = np.repeat(_law(C_K * np.array([0.5, 1, 1, 1]))[:, None], 3, axis=1)  # worse than Pre-Norm's smallest
  assert compute_equiv.multiplier(pre, above, C_K, C_K, resamples=20).extrapolation == pytest.approx(2.0)


def test_a_resample_whose_fit_does_not_fall_sits_at_the_least_favourable_end():
  """One seed of three has Pre-Norm's loss rising with compute: a resample drawing it twice or more (7 in 27) has no
  fit, and a 90% interval with that failed share has its lower end at 0 (no Pre-Norm compute reaches it), its upper
  end finite."""
  pre = np.repeat(_law(C_K)[:, None], 3, axis=1)
  pre[:, 0] = _law(C_K)[::-1]
  place = np.repeat(_law(1.2 * C_K)[:, None], 3, axis=1)
  m = compute_equiv.multiplier(pre, place, C_K, C_K, resamples=2000, level=0.9, seed=3)
  assert 0.2 < m.failed_frac < 0.32
  assert m.lo == 0.0 and np.isfinite(m.hi) and m.hi > 1


def test_the_t_interval_over_seed_multipliers_is_students_and_wider_than_the_bootstrap():
  """Each seed's ladder against its own Pre-Norm fit; the t interval of their mean log, in multiplier units, covers
  the true multiplier at about its level where the percentile bootstrap over the same 5 seeds covers less."""
  from scipy import stats as st
  rng = np.random.default_rng(3)
  pre, place = _ladder(rng, 5, 1.3)
  logs = compute_equiv.seed_log_multipliers(pre, place, C_K, C_K)
  for s in range(5):   # seed s alone: its own fit
    one = compute_equiv.multiplier(pre[:, [s]], place[:, [s]], C_K, C_K, resamples=2)
    assert np.exp(logs[s]) == pytest.approx(one.value, rel=1e-9)
  iv = compute_equiv.t_interval(logs)
  half = st.t.ppf(0.975, 4) * logs.std(ddof=1) / np.sqrt(5)
  assert (np.log(iv.lo), np.log(iv.value), np.log(iv.hi)) == pytest.approx((logs.mean() - half, logs.mean(),
                                                                               logs.mean() + half))
  assert compute_equiv.t_interval([0.1, np.nan]) is None and iv.n == 5
  hits_t = hits_b = 0
  for _ in range(60):
    pre, place = _ladder(rng, 5, 1.3)
    t = compute_equiv.t_interval(compute_equiv.seed_log_multipliers(pre, place, C_K, C_K))
    b = compute_equiv.multiplier(pre, place, C_K, C_K, resamples=200)
    hits_t += t.lo <= 1.3 <= t.hi
    hits_b += b.lo <= 1.3 <= b.hi
  assert hits_t >= hits_b and hits_t >= 50, (hits_t, hits_b)


def test_the_misfit_range_and_the_interpolation_see_what_the_fit_hides():
  """Pre-Norm's rungs off any power law (a bend): the leave-one-rung-out fits move the multiplier, and reading
  between Pre-Norm's own rungs recovers a placement that reaches each rung's loss at exactly 1.5x less compute."""
  bent = _law(C_K) * np.array([1.0, 0.97, 0.99, 0.985])        # Pre-Norm's rung means, not on one law
  pre = np.repeat(bent[:, None], 3, axis=1)
  # the placement reaches, at C_K[k] / 1.5 ... in log-log between rungs: the rung losses at 1.5x less compute
  c_place = C_K / 1.5
  place = np.repeat(bent[:, None], 3, axis=1)
  np.testing.assert_allclose(compute_equiv.interpolated(pre, place, C_K, c_place), 1.5, rtol=1e-9)
  lo, hi = compute_equiv.leave_one_rung_out(pre, place, C_K, c_place)
  assert hi - lo > 0.05     # the fit's misfit alone moves it
  flat = np.repeat(_law(C_K)[:, None], 3, axis=1)
  lo, hi = compute_equiv.leave_one_rung_out(flat, flat, C_K, c_place)
  assert lo == pytest.approx(1.5) and hi == pytest.approx(1.5)   # on a law, no rung moves it
  assert compute_equiv.interpolated(pre[::-1], place, C_K, c_place) is None  # not falling: no reading
  # beyond the ladder's ends, the end segments extend
  below = np.repeat((bent * 0.99)[:, None], 3, axis=1)
  assert all(np.isfinite(compute_equiv.interpolated(pre, below, C_K, C_K)))


def test_the_compute_charged_is_the_placements_and_the_first_segment_extends_below_the_ladder():
  """The same losses as Pre-Norm at 1.5x less compute: 1.5 per seed. A mean loss above Pre-Norm's first rung reads
  Pre-Norm's first segment extended (not the second)."""
  pre = np.repeat(_law(C_K)[:, None], 3, axis=1)
  np.testing.assert_allclose(np.exp(compute_equiv.seed_log_multipliers(pre, pre, C_K, C_K / 1.5)), 1.5, rtol=1e-9)
  bent = _law(C_K) * np.array([1.0, 0.97, 0.99, 0.985])
  above = np.repeat((bent * 1.01)[:, None], 2, axis=1)
  got = compute_equiv.interpolated(np.repeat(bent[:, None], 2, axis=1), above, C_K, C_K)
  ll, lc = np.log(bent), np.log(C_K)
  t = (np.log(bent[0] * 1.01) - ll[0]) / (ll[1] - ll[0])
  assert got[0] == pytest.approx(np.exp(lc[0] + t * (lc[1] - lc[0])) / C_K[0], rel=1e-9)
