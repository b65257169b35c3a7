%% @doc The long-partition family of the simulator: one copy of an EC table cut off for most
%% of a run under steady load, on the runtime's own cores ({@link hm_sim}'s engine,
%% network and checkers), with a bound on the log (option `log_limit' of
%% {@link hm_ec_table}, small here) and catching up by state on.
%%
%% Besides every checker of {@link hm_sim} (convergence after the heal, no lost
%% acknowledged write, causal delivery, stability safety, no metadata left at quiescence),
%% it checks what a copy keeps while the cut lasts, every ?CHECK_EVERY_MS simulated ms on
%% every copy:
%% <ul>
%% <li>the log holds at most `log_limit' operations plus those made in the last
%% ?RECENT_MS (what a member heard from lately may still lack, and what was made before a
%% silent member counted as gone): it does not grow with the cut;</li>
%% <li>the unstable metadata grows with the keys written, not with the writes: at most one
%% key's row per key, and at most one timestamp per copy and key.</li>
%% </ul>
%% Half the seeds drop and duplicate 2 % of the messages each.
%% The copies are `ram_copies' (only copies that can take a state give up operations).
%% Odd seeds catch up by state when far behind; even seeds only when sent a state, as a
%% table with more rows than the cut's operations does. Half the seeds send states in parts,
%% and one in three cuts the copy off again while they are on their way.
-module(hm_sim_long).

-export([gen/1, run_seed/1, run_seed/2, check_seeds/2]).

%% what a copy may still keep beyond `log_limit': the operations made this recently (a
%% member counts as gone after hm_ec_table's ?HEARD_TICKS ticks of silence, 4 s)
-define(RECENT_MS, 6000).
%% the cut, from and to (simulated ms)
-define(CUT_MS, 2000).
-define(HEAL_MS, 20000).
%% a copy is looked at this often
-define(CHECK_EVERY_MS, 100).

%% @doc The configuration and trace of seed `Seed': 3 or 4 copies, 20 to 60 keys, 4,000 to
%% 8,000 client operations over 24 simulated seconds, one copy cut off from the 2nd to the
%% 20th, a log bound of 100 to 300 operations, half of them on a network that drops and
%% duplicates messages.
-spec gen(integer()) -> {hm_sim:cfg(), [hm_sim:action()]}.
gen(Seed) ->
    R0 = rand:seed_s(exsss, {Seed, 16#1019, 16#c07}),
    {[N, TI, PI, Delay, NKeys, NOps, Victim, Limit, Win, Lossy], R1} =
        hm_sim:draws([{int, 3, 4}, {int, 1, 2}, {int, 1, 3}, {int, 1, 20}, {int, 20, 60},
                      {int, 4000, 8000}, {int, 1, 4}, {int, 100, 300}, {int, 8, 64},
                      {int, 0, 1}], R0),
    Dur = 24000,
    Nodes = hm_sim:nodes_of(N),
    Keys = [list_to_atom("k" ++ integer_to_list(I)) || I <- lists:seq(1, NKeys)],
    Cfg = #{n => N, type => element(TI, {pawset, prwset}),
            policy => element(PI, {term_order, lww, siblings}), storage => ram,
            drop => Lossy * 0.02, dup => Lossy * 0.02, delay => Delay, duration => Dur,
            seed => Seed,
            keys => Keys, window => Win, catch_up => catch_up(Seed), log_limit => Limit,
            part_keys => part_keys(Seed), parts_late => Seed rem 8 < 4,
            fold_keys => fold_keys(Seed), skew => maps:from_list([{Nd, 0} || Nd <- Nodes])},
    %% writes mostly, deletes, and rarely a clear
    {Ops, _} = hm_sim:gen_ops(NOps, Nodes, Dur, Keys, {1000, 700, 850, 998}, R1),
    X = lists:nth(1 + (Victim - 1) rem N, Nodes),
    Cut = [{?CUT_MS, {partition, isolated, [[X], Nodes -- [X]]}}, {?HEAL_MS, heal}],
    {Cfg, lists:keysort(1, Ops ++ Cut ++ recut(Seed, X, Nodes))}.

%% States in parts of 4 keys (hm_ec_table_stream) in half the seeds, one message in the
%% others; in half of those each part is read as it goes, in the others all at once.
part_keys(Seed) when Seed rem 4 < 2 -> 4;
part_keys(_) -> infinity.

%% Stabilization in steps of 5 keys (hm_ec_table option `fold_keys') in one seed in three:
%% the heal's keys become stable at once and are folded over many steps.
fold_keys(Seed) when Seed rem 3 =:= 0 -> 5;
fold_keys(_) -> infinity.

%% One seed in three cuts the copy off again soon after the heal, for 0.5 to 2.5 s, while
%% the states it is sent are on their way: a transfer cut in the middle.
recut(Seed, X, Nodes) when Seed rem 3 =:= 0 ->
    R0 = rand:seed_s(exsss, {Seed, 16#7ec, 16#c07}),
    {[Gap, Len], _} = hm_sim:draws([{int, 50, 600}, {int, 500, 2500}], R0),
    [{?HEAL_MS + Gap, {partition, isolated, [[X], Nodes -- [X]]}},
     {?HEAL_MS + Gap + Len, heal}];
recut(_, _, _) -> [].

%% Catching up by state when far behind (odd seeds), or, as on a table with more rows than
%% a cut's operations, only when sent a state (even seeds): a copy gives up operations only
%% when catching up by state is on.
catch_up(Seed) when Seed rem 2 =:= 1 -> 100;
catch_up(_) -> 1000000.

%% @doc Run seed `Seed' and check it: {@link hm_sim}'s checkers, and the bounds above.
-spec run_seed(integer()) -> hm_sim:result().
run_seed(Seed) -> run_seed(Seed, #{}).

%% @doc {@link run_seed/1} with options overriding the configuration's (`log_limit =>
%% infinity' runs the copies without the bound, against the same checks).
-spec run_seed(integer(), map()) -> hm_sim:result().
run_seed(Seed, Opts) ->
    {Cfg0 = #{log_limit := Limit, keys := Keys, n := N}, Trace} = gen(Seed),
    Cfg = maps:merge(Cfg0, Opts),
    Times = list_to_tuple(lists:sort([T || {T, {op, _, _, _}} <- Trace])),
    Probe = fun(Now, Nd, _Effs, R, Acc) ->
                    look(Now, Nd, R, Acc, {Limit, Times, length(Keys), N})
            end,
    Res = #{failures := Fs, stats := St} =
        hm_sim:run(Cfg#{probe => {Probe, #{last => #{}, bad => [], max_log => 0}}}, Trace),
    case maps:get(probe, St, none) of
        #{bad := [], max_log := MaxLog} -> Res#{stats := St#{max_log => MaxLog}};
        #{bad := Bad, max_log := MaxLog} ->
            Res#{ok := false, failures := Fs ++ [{bound, Bad}],
                 stats := St#{max_log => MaxLog}};
        none -> Res                             % the run failed before it could look
    end.

%% Every ?CHECK_EVERY_MS on each copy: its log against the bound, its metadata against the
%% keys.
look(Now, Nd, R, Acc = #{last := Last, bad := Bad, max_log := Max}, {Limit, Times, Keys, Copies}) ->
    case Now - maps:get(Nd, Last, -?CHECK_EVERY_MS) >= ?CHECK_EVERY_MS andalso R =/= out
        andalso Now >= ?CUT_MS andalso Now < ?HEAL_MS of
        false -> Acc;
        true ->
            Log = hm_tcsb:log_size(hm_ec_table:tcsb(R)),
            Bound = Limit + recent(Now, Times),
            Meta = hm_ec_store_map:meta_map(hm_ec_table:store(R)),
            Ts = lists:sum([hm_ec_key:timestamps(KS) || KS <- maps:values(Meta)]),
            Bad1 = [{log, Nd, Now, Log, Bound} || Log > Bound]
                ++ [{metadata, Nd, Now, map_size(Meta), Ts}
                    || map_size(Meta) > Keys orelse Ts > Copies * Keys],
            Acc#{last := Last#{Nd => Now}, bad := lists:sublist(Bad ++ Bad1, 10),
                 max_log := max(Max, Log)}
    end.

%% How many client operations were made in the last ?RECENT_MS (binary search of the sorted
%% times).
recent(Now, Times) -> below(Now + 1, Times) - below(Now - ?RECENT_MS, Times).

%% How many of the sorted `Times' are less than `T'.
below(T, Times) -> below(T, Times, 0, tuple_size(Times)).

below(_, _, Lo, Hi) when Lo >= Hi -> Lo;
below(T, Times, Lo, Hi) ->
    Mid = (Lo + Hi) div 2,
    case element(Mid + 1, Times) < T of
        true -> below(T, Times, Mid + 1, Hi);
        false -> below(T, Times, Lo, Mid)
    end.

%% @doc Seeds `From' to `From + Count - 1': `{Passed, Failed, Failures}'.
-spec check_seeds(integer(), pos_integer()) ->
          {non_neg_integer(), non_neg_integer(), [{integer(), [term()]}]}.
check_seeds(From, Count) ->
    lists:foldl(fun(Seed, {P, F, Bad}) ->
                        case run_seed(Seed) of
                            #{ok := true} -> {P + 1, F, Bad};
                            #{failures := Fs} -> {P, F + 1, Bad ++ [{Seed, Fs}]}
                        end
                end, {0, 0, []}, lists:seq(From, From + Count - 1)).
