%% @doc The statistics every benchmark reports: means, medians and nearest-rank percentiles.
%%
%% Two medians, because the benchmarks report two kinds: {@link median/1} is the statistic
%% (the mean of the two middle values of an even count), {@link lower_median/1} a sample that
%% was measured (the lower of the two middle ones), for figures that must be a real run.
-module(hm_bench_stats).

-export([mean/1, mean/2, median/1, lower_median/1, percentile/2, percentiles/2]).

%% @doc The arithmetic mean, `null' for no samples.
-spec mean([number()]) -> float() | null.
mean(L) -> mean(L, null).

%% @doc The arithmetic mean, `Empty' for no samples.
-spec mean([number()], Empty) -> float() | Empty.
mean([], Empty) -> Empty;
mean(L, _) -> lists:sum(L) / length(L).

%% @doc The median: the middle value, or the mean of the two middle ones; `null' for no
%% samples.
-spec median([number()]) -> number() | null.
median([]) -> null;
median(L) ->
    S = lists:sort(L),
    N = length(S),
    case N rem 2 of
        1 -> lists:nth(N div 2 + 1, S);
        0 -> (lists:nth(N div 2, S) + lists:nth(N div 2 + 1, S)) / 2
    end.

%% @doc The middle sample, the lower of the two middle ones for an even count (a value that
%% was measured). Fails on no samples.
-spec lower_median([T, ...]) -> T.
lower_median(L) -> lists:nth((length(L) + 1) div 2, lists:sort(L)).

%% @doc The nearest-rank percentile `Q' (0..1) of sorted samples: the sample of rank
%% `round(Q * N)', at least the first and at most the last. Fails on no samples.
-spec percentile([T, ...], number()) -> T.
percentile(Sorted, Q) ->
    [P] = percentiles(Sorted, [Q]),
    P.

%% @doc {@link percentile/2} for each of `Qs', in their order, of sorted samples.
-spec percentiles([T, ...], [number()]) -> [T].
percentiles(Sorted, Qs) ->
    T = list_to_tuple(Sorted),
    N = tuple_size(T),
    [element(max(1, min(N, round(Q * N))), T) || Q <- Qs].
