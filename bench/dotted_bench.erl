%% @doc DottedDB's evaluation shapes (*DottedDB: Anti-Entropy without Merkle Trees, Deletes
%% without Tombstones*, §V) on the pure cores {@link hm_dotted} and {@link hm_merkle}, next to
%% the other replication a partitioned table offers, tagged causal stable broadcast ("tcsb",
%% *Hypermnesia: Eventual Consistency in Mnesia*, §4.3–4.8), in one VM: the time-dependent
%% experiments run on the deterministic simulators' network (simulated milliseconds):
%% {@link hm_sim_dotted} for dotted and Merkle, the table simulator {@link hm_sim} (the
%% runtime's own {@link hm_ec_table} over {@link hm_tcsb} and {@link hm_ec_key}, through its
%% `probe' measurement hook) for tcsb, with the same keys, rates, loss, delays, seeds and
%% simulated time; the per-exchange dotted and Merkle figures call the cores directly.
%% `make bench-dotted' writes `bench/results/dotted-<yyyymmdd-hhmm>.md'.
%%
%% Experiments (each names the paper's figure or table it follows), and what the tcsb rows
%% measure in the same workload (a pawset whose keys show siblings, ram copies; tcsb's copies
%% tick every 250 ms as at run time, for acknowledgements, retransmission and stabilization;
%% "replication loss" loses that share of operations' first transmissions):
%% <ol>
%% <li>clock entries per key under churn (Fig. 1): one copy replaced every second, writes
%% every 10 ms at random copies (read, modify, write), N = 3 and N = 6; the mean number of
%% node ids in the clocks written to storage per 2 s window, and per stored key after
%% quiescence, next to what per-key version vectors that never drop an entry would hold.
%% tcsb: the replacements are copies removed and added on new nodes; the timestamps a key
%% keeps ({@link hm_ec_key:timestamps/1}) after each operation applied and per key at
%% quiescence, and beside them the entries of each operation's vector timestamp and of the
%% delivered vector;</li>
%% <li>strip latency (Fig. 2): anti-entropy every 100 ms, strip every 100 ms, 1 s or 5 s,
%% replication messages lost at 10 % or 100 %: time from a put to the moment each copy stores
%% its object with an empty context. tcsb: time from a write until each copy holds its key
%% with no timestamp (stabilized) while it shows the write;</li>
%% <li>object count under 50 % deletes (Fig. 3): 2,000 keys loaded, then 100 operations per
%% second, half puts and half deletes; stored objects at one copy against the ideal (keys
%% with a value), and per delete the time until every copy has physically removed the key,
%% against the strip interval (2.5 s). tcsb: rows, keys with timestamps and operations logged
%% until stable (deletes among them) at that copy; per delete the time until every copy
%% applied it and until every copy forgot it;</li>
%% <li>anti-entropy metadata and traffic per exchange (Fig. 4): 10,000 keys on 3 copies,
%% 1 % or 10 % of them then updated at one copy with replication lost, one exchange from a
%% lagging copy: bytes (external term format) split into object data and synchronisation
%% metadata, and the metadata each copy keeps, node clock against Merkle trees of 16-way
%% fan-out and depth 1 to 4. tcsb, which has no exchange: the copy cut off while it
%% updates, then healed; the bytes retransmission and acknowledgements take to repair one
%% lagging copy, and the whole group until the updates are stable; the broadcast state and
%% key metadata a copy keeps at rest and diverged;</li>
%% <li>replication latency with message loss (Fig. 5): time from a put at its coordinator to
%% its version stored at each other copy, replication loss 10 % and 100 %, node-clock and
%% Merkle anti-entropy every 100 ms; tcsb: until each other copy applied the write.</li>
%% </ol>
%% Targets reported as met or missed: anti-entropy bytes at most 0.2x Merkle's at 1 %
%% divergence; at most 2 clock entries per key after churn at N = 3; deleted keys physically
%% gone within 2x the strip interval.
-module(dotted_bench).

-export([main/1]).

-define(MERKLE_SHAPES, [{16, 1}, {16, 2}, {16, 3}, {16, 4}]).
%% tcsb: the copies of a new group first agree that they all start empty (a round trip):
%% the workload starts that much later there, and times are reported on the dotted
%% workload's clock
-define(TCSB_START, 20).

%% @doc `main([Dir])': run every experiment and write the report into `Dir'.
-spec main([string()]) -> ok.
main([Dir]) ->
    {{Y, Mo, D}, {H, Mi, _}} = calendar:universal_time(),
    Id = lists:flatten(io_lib:format("dotted-~4..0w~2..0w~2..0w-~2..0w~2..0w", [Y, Mo, D, H, Mi])),
    T0 = erlang:monotonic_time(millisecond),
    Sections = [run(F) || F <- [fun churn/0, fun strip_latency/0, fun deletes/0,
                                fun exchange/0, fun replication_latency/0]],
    {Texts, Targets} = lists:unzip(Sections),
    Secs = (erlang:monotonic_time(millisecond) - T0) div 1000,
    Head = io_lib:format(
             "# DottedDB replication, the Merkle baseline and tcsb: run ~s\n\n"
             "Produced by `make bench-dotted` (`bench/dotted_bench.erl`, OTP ~s, ~p s of wall "
             "time). Time-dependent figures are simulated milliseconds of the deterministic "
             "simulators' network (`sim/hm_sim_dotted.erl` for dotted and Merkle, "
             "`sim/hm_sim.erl`, the runtime's table core over tagged causal stable broadcast, "
             "for tcsb; seeded): they are the same on every machine. Byte counts are the "
             "external term format size of the messages.\n\n"
             "## Targets\n\n| target | measured | |\n|---|---|---|\n~s\n",
             [Id, erlang:system_info(otp_release), Secs,
              [io_lib:format("| ~s | ~s | ~s |\n",
                             [T, M, case Ok of true -> "met"; false -> "MISSED" end])
               || {T, M, Ok} <- lists:append(Targets)]]),
    File = filename:join(Dir, Id ++ ".md"),
    ok = filelib:ensure_dir(File),
    ok = file:write_file(File, [Head | Texts]),
    io:format("~s~nwritten ~s~n", [Head, File]).

run(F) ->
    {T, Res} = timer:tc(F),
    io:format("~p ms~n", [T div 1000]),
    Res.

%%% ================================================================ simulator helpers

base_cfg(N, Seed) ->
    #{kind => dotted, n => N, ae => node_clock, drop => 0.0, dup => 0.0, delay => 5,
      duration => 10000, seed => Seed, skew => #{}, measure => true,
      strip_interval => 250, sync_interval => 100}.

keys(K) -> [list_to_atom("k" ++ integer_to_list(I)) || I <- lists:seq(1, K)].

%% writes every `Every' ms from `From' to `To', at random copies, on random keys
writes(From, To, Every, Keys, PutShare, R0) ->
    KT = list_to_tuple(Keys),
    {Acts, R} = lists:mapfoldl(
                  fun(T, R1) ->
                          {I, R2} = rand:uniform_s(6, R1),
                          {K, R3} = rand:uniform_s(tuple_size(KT), R2),
                          {U, R4} = rand:uniform_s(R3),
                          Op = case U < PutShare of true -> put; false -> delete end,
                          {{T, {op_i, I, element(K, KT), Op}}, R4}
                  end, R0, lists:seq(From, To, Every)),
    {Acts, R}.

samples(#{stats := #{samples := S}}) -> S.

ok_run(What, Res = #{ok := true}) -> io:format("~s: ok~n", [What]), Res;
ok_run(What, #{failures := F}) -> error({run_failed, What, lists:sublist(F, 3)}).

pct(L, P) when L =/= [] -> hm_bench_stats:percentile(lists:sort(L), P / 100);
pct([], _) -> na.

mean(L) -> hm_bench_stats:mean(L, 0.0).

f1(X) when is_float(X) -> io_lib:format("~.2f", [X]);
f1(X) -> io_lib:format("~p", [X]).

%%% ================================================================ 1. churn

churn() ->
    Rows = [churn_row(N) || N <- [3, 6]],
    TRows = [tcsb_churn_row(N) || N <- [3, 6]],
    Text = ["## 1. Clock entries per key under churn (Fig. 1)\n\n"
            "200 keys, a write every 10 ms at a random copy (get, then put with its context), "
            "one copy replaced by a new node id every second for 20 s (the new copy takes a "
            "handoff), replication loss 10 %, anti-entropy every 100 ms, strip every 250 ms. "
            "`stored clocks` is the mean number of node ids in the clock of every object "
            "written to storage in each 2 s window; `after` is per stored key once the group "
            "is quiescent; `per-key VV` is what a version vector per key that never drops an "
            "entry (MerkleDB's dotted version vectors) would hold at the end: every node id "
            "that ever wrote the key.\n\n"
            "tcsb runs the same writes (each a write of the key at that copy: it replaces "
            "the versions the copy has seen) and the same replacements as copies removed "
            "(`del_table_copy`) and added on a new node (`add_table_copy`: the new copy takes "
            "a snapshot), first transmissions of operations lost at 10 % (retransmission "
            "repairs them). Its per-key metadata is the timestamps (one dot each) a key keeps "
            "until they are stable (`hm_ec_key:timestamps/1`): `stored clocks` is their mean "
            "after every operation applied at a copy, `after` per stored key at quiescence. "
            "Besides, every operation carries a vector timestamp, logged with it until it is "
            "stable, and every copy keeps a delivered vector (table below).\n\n"
            "| N | replication | replaced | stored clocks, mean per 2 s window | after: mean / max "
            "| per-key VV: mean / max | ids ever |\n"
            "|---|---|---|---|---|---|---|\n",
            [io_lib:format("| ~p | ~s | ~p | ~s | ~s / ~p | ~s / ~p | ~p |\n",
                           [N, Mode, Rep, string:join([f1(W) || W <- Win], ", "), f1(AM), AX,
                            f1(VM), VX, Ids])
             || {Mode, {N, Rep, Win, AM, AX, VM, VX, Ids}}
                    <- lists:append([[{"dotted", R}, {"tcsb", churn_columns(T)}]
                                     || {R, T} <- lists:zip(Rows, TRows)])],
            "\ntcsb's other clocks under the same churn: entries of the vector timestamp of "
            "each operation applied (one per copy incarnation the origin has delivered from, "
            "retired ones included), mean per 2 s window, and the entries of a copy's "
            "delivered vector at the end.\n\n"
            "| N | operation vector entries, mean per 2 s window | delivered vector at the end |\n"
            "|---|---|---|\n",
            [io_lib:format("| ~p | ~s | ~p |\n",
                           [N, string:join([f1(W) || W <- VWin], ", "), DV])
             || {N, _, _, _, _, _, _, _, VWin, DV} <- TRows], "\n"],
    {3, _, _, AM3, AX3, _, _, _} = hd(Rows),
    {Text, [{"<= 2 clock entries per key after churn at N = 3",
             io_lib:format("mean ~s, max ~p", [f1(AM3), AX3]), AX3 =< 2}]}.

%% a tcsb churn row without its tcsb-only columns
churn_columns(T) -> erlang:delete_element(9, erlang:delete_element(10, T)).

churn_row(N) ->
    Keys = keys(200),
    {Ws, _} = writes(10, 20000, 10, Keys, 1.0, rand:seed_s(exsss, {N, 1, 1})),
    Churn = [{T, {replace, I}} || {T, I} <- lists:zip(lists:seq(1000, 20000, 1000),
                                                       [1 + (X rem N) || X <- lists:seq(1, 20)])],
    Cfg = (base_cfg(N, 100 + N))#{duration => 20001, drop_replicate => 0.1},
    Res = ok_run(io_lib:format("churn N=~p", [N]),
                 hm_sim_dotted:run(Cfg, lists:keysort(1, Ws ++ Churn))),
    Sm = samples(Res),
    Stores = [{T, E} || {T, _, _, #{entries := E, removed := false}} <- Sm],
    Win = [mean([E || {T, E} <- Stores, T >= W, T < W + 2000]) || W <- lists:seq(0, 18000, 2000)],
    %% after quiescence: the last clock each key was stored with at each copy
    Last = maps:values(lists:foldl(fun({_, Nd, K, #{entries := E, removed := Rm}}, M) ->
                                           case Rm of
                                               true -> maps:remove({Nd, K}, M);
                                               false -> M#{{Nd, K} => E}
                                           end;
                                      (_, M) -> M
                                   end, #{}, Sm)),
    Writers = lists:foldl(fun({write, _, Nd, K, _, _}, M) ->
                                  M#{K => lists:usort([Nd | maps:get(K, M, [])])};
                             (_, M) -> M
                          end, #{}, Sm),
    VV = [length(W) || W <- maps:values(Writers)],
    Ids = length(lists:usort([Nd || {write, _, Nd, _, _, _} <- Sm])),
    {N, maps:get(replaced, maps:get(stats, Res), 0), Win, mean(Last), lists:max([0 | Last]),
     mean(VV), lists:max([0 | VV]), Ids}.

%%% ================================================================ 2. strip latency

strip_latency() ->
    Rows = [{io_lib:format("dotted, strip every ~p ms", [StripMs]), Loss, strip_row(StripMs, Loss)}
            || StripMs <- [100, 1000, 5000], Loss <- [0.1, 1.0]]
        ++ [{"tcsb, stabilization every 250 ms tick", Loss, tcsb_strip_row(Loss)}
            || Loss <- [0.1, 1.0]],
    Text = ["## 2. Strip latency (Fig. 2)\n\n"
            "3 copies, 100 keys, a put every 20 ms for 10 s at a random copy, anti-entropy every "
            "100 ms; per put and copy, the time from the put until that copy stores the object "
            "with an empty context (ms). Puts superseded at a copy before it stripped them are "
            "not counted there.\n\n"
            "tcsb (the writes of the 100 ms rows, first transmissions lost at 10 % or 100 %): "
            "per write and copy, the time from the write until that copy holds the key with "
            "no timestamp while it still shows the write's version (the key stabilized: every "
            "copy has acknowledged the write and everything the key saw before, and the copy "
            "learned it). A copy stabilizes at its 250 ms tick, once acknowledgements, sent "
            "at ticks, have come back from every member; writes superseded at a copy before "
            "are not counted there.\n\n"
            "| replication | replication loss | samples | p50 | p90 | p99 | max |\n"
            "|---|---|---|---|---|---|---|\n",
            [io_lib:format("| ~s | ~p % | ~p | ~p | ~p | ~p | ~p |\n",
                           [Mode, round(L * 100), length(Ls), pct(Ls, 50), pct(Ls, 90),
                            pct(Ls, 99), pct(Ls, 100)])
             || {Mode, L, Ls} <- Rows], "\n"],
    {Text, []}.

tcsb_strip_row(Loss) ->
    {Ws, _} = writes(10, 10000, 20, keys(100), 1.0, rand:seed_s(exsss, {100, 2, 2})),
    {Trace, U, _} = tcsb_trace(3, Ws),
    P = #{ev := Ev} = tcsb_run(io_lib:format("tcsb strip ~p", [Loss]), U, 200, 10000, Loss, #{},
                               Trace),
    Folded = firsts(folded, Ev),
    [T - T0 || {write, T0, _, _, Dot, _} <- tcsb_writes(P), Nd <- [n1, n2, n3],
               T <- [maps:get({Nd, Dot}, Folded, none)], T =/= none].

strip_row(StripMs, Loss) ->
    {Ws, _} = writes(10, 10000, 20, keys(100), 1.0, rand:seed_s(exsss, {StripMs, 2, 2})),
    Cfg = (base_cfg(3, 200))#{strip_interval => StripMs, drop_replicate => Loss},
    Res = ok_run(io_lib:format("strip ~p ~p", [StripMs, Loss]), hm_sim_dotted:run(Cfg, Ws)),
    Sm = samples(Res),
    %% per copy and key, the store events in time order
    ByCK = lists:foldl(fun({T, Nd, K, Info}, M) ->
                               M#{{Nd, K} => [{T, Info} | maps:get({Nd, K}, M, [])]};
                          (_, M) -> M
                       end, #{}, Sm),
    Nodes = lists:usort([Nd || {_, Nd, _, _} <- Sm]),
    lists:append(
      [[T - T0 || Nd <- Nodes,
                  T <- first_stripped(Dot, T0, lists:reverse(maps:get({Nd, K}, ByCK, [])))]
       || {write, T0, _, K, Dot, _} <- Sm]).

first_stripped(Dot, T0, Events) ->
    case [{T, I} || {T, I = #{dots := Ds}} <- Events, T >= T0, lists:member(Dot, Ds)] of
        [] -> [];
        Held ->
            %% stripped while still a live version there
            case lists:dropwhile(fun({_, #{stripped := St}}) -> not St end, Held) of
                [{T, _} | _] -> [T];
                [] -> []
            end
    end.

%%% ================================================================ 3. deletes

deletes() ->
    StripMs = 2500,
    Keys = keys(2000),
    Load = [{I, {op_i, I, K, put}} || {I, K} <- lists:zip(lists:seq(1, 2000), Keys)],
    {Ws, _} = writes(3000, 23000, 10, Keys, 0.5, rand:seed_s(exsss, {3, 3, 3})),
    Cfg = (base_cfg(3, 300))#{strip_interval => StripMs, drop_replicate => 0.1,
                              duration => 23001},
    Res = ok_run("deletes", hm_sim_dotted:run(Cfg, Load ++ Ws)),
    Sm = samples(Res),
    %% stored objects at n1 and the ideal (keys whose last write was a put), per second
    Times = lists:seq(2000, 26000, 2000),
    Stored = fun(T) ->
                     M = lists:foldl(fun({Ts, n1, K, #{removed := Rm}}, A) when Ts =< T ->
                                             case Rm of true -> maps:remove(K, A); false -> A#{K => 1} end;
                                        (_, A) -> A
                                     end, #{}, Sm),
                     map_size(M)
             end,
    WriteOps = [{T, K, Op} || {write, T, _, K, _, Op} <- Sm],
    Ideal = fun(T) -> ideal(T, WriteOps) end,
    Rows = [{T, Ideal(T), Stored(T)} || T <- Times],
    %% per delete: until every copy removed the key (deletes followed by a put of the same
    %% key before that are not counted)
    Nodes = [n1, n2, n3],
    Gone = lists:append(
             [case removed_everywhere(K, T0, Nodes, Sm, WriteOps) of
                  none -> [];
                  T -> [T - T0]
              end || {T0, K, delete} <- WriteOps, T0 >= 3000]),
    Max = pct(Gone, 100),
    {TRows, TApplied, TForgot} = tcsb_deletes(Times, Load ++ Ws),
    Text = ["## 3. Objects stored under 50 % deletes (Fig. 3)\n\n"
            "3 copies, 2,000 keys loaded in the first 2 s, then from 3 s to 23 s an operation "
            "every 10 ms at a random copy, half puts and half deletes of random keys (each with "
            "the context of a get at that copy), replication loss 10 %, anti-entropy every "
            "100 ms, strip every 2.5 s. Stored objects at one copy against the ideal (keys with "
            "a value: immediate removal); a per-key clock kept as a tombstone would keep all "
            "2,000.\n\n"
            "tcsb runs the same operations (a delete removes the versions the copy has seen; "
            "first transmissions lost at 10 %). A `pawset` delete is never stored with its key "
            "(a key that loses its last version loses its row and its metadata when the delete "
            "is applied); what tcsb keeps for it is the operation itself, with its vector "
            "timestamp, in the broadcast log of every copy until it is stable. At the same copy: "
            "`rows` (keys with a value), `keys with timestamps` (metadata rows: keys with "
            "unstable versions), and the operations logged until stable, deletes among them.\n\n"
            "| time (s) | ideal | dotted: stored | tcsb: rows | tcsb: keys with timestamps "
            "| tcsb: logged operations (deletes) |\n|---|---|---|---|---|---|\n",
            [io_lib:format("| ~p | ~p | ~p | ~p | ~p | ~p (~p) |\n",
                           [T div 1000, I, S, TR, TM, TL, TD])
             || {{T, I, S}, {T, TR, TM, TL, TD, TI}} <- lists:zip(Rows, TRows),
                %% the same operations: the same ideal
                ok =:= case TI of I -> ok; _ -> error({ideal_differs, T, I, TI}) end],
            io_lib:format("\nTime from a delete until every copy has physically removed the key "
                          "(~p deletes): p50 ~p ms, p90 ~p ms, p99 ~p ms, max ~p ms "
                          "(strip interval ~p ms).\n\n",
                          [length(Gone), pct(Gone, 50), pct(Gone, 90), pct(Gone, 99), Max,
                           StripMs]),
            io_lib:format("tcsb (~p deletes): from a delete until every copy applied it (the "
                          "versions it saw are gone there) p50 ~p ms, p90 ~p ms, p99 ~p ms, max "
                          "~p ms; until every copy forgot it (stable: off every log) p50 ~p ms, "
                          "p90 ~p ms, p99 ~p ms, max ~p ms.\n\n",
                          [length(TApplied), pct(TApplied, 50), pct(TApplied, 90),
                           pct(TApplied, 99), pct(TApplied, 100), pct(TForgot, 50),
                           pct(TForgot, 90), pct(TForgot, 99), pct(TForgot, 100)])],
    {Text, [{"deleted keys physically gone within 2x the strip interval",
             io_lib:format("max ~p ms, p99 ~p ms for a strip interval of ~p ms", [Max, pct(Gone, 99), StripMs]),
             is_integer(Max) andalso Max =< 2 * StripMs}]}.

%% the tcsb column of 3: per mark, n1's rows, keys with timestamps, logged operations and
%% deletes among them; per delete, until every copy applied it and until every copy forgot it
tcsb_deletes(Times, Acts) ->
    {Trace, U, _} = tcsb_trace(3, Acts),
    P = #{ev := Ev} =
        tcsb_run("tcsb deletes", U, 300, 23001, 0.1,
                 #{marks => [T + ?TCSB_START || T <- Times]}, Trace),
    WriteOps = [{T - ?TCSB_START, K, Op} || {write, T, _, K, _, Op} <- tcsb_writes(P)],
    Ideal = fun(T) -> ideal(T, WriteOps) end,
    Rows = [begin
                R = at(P, T + ?TCSB_START, n1),
                St = hm_ec_table:store(R),
                B = hm_ec_table:tcsb(R),
                {T, length(lists:usort([element(2, Rec) || Rec <- hm_ec_table:rows(R)])),
                 length(hm_ec_store:meta_keys(St)), hm_tcsb:log_size(B),
                 length([x || {_, _, {_, _, delete}} <- hm_tcsb:log_msgs(B)]), Ideal(T)}
            end || T <- Times],
    Applied = firsts(applied, Ev),
    Gone = firsts(gone, Ev),
    Nodes = [n1, n2, n3],
    Dels = [{T0, Nd0, D} || {write, T0, Nd0, _, D, delete} <- tcsb_writes(P),
                            T0 - ?TCSB_START >= 3000],
    Until = fun(M, Who) ->
                    [lists:max(Ts) - T0 || {T0, Nd0, D} <- Dels,
                                           Ts <- [[maps:get({Nd, D}, M, none) || Nd <- Who(Nd0)]],
                                           not lists:member(none, Ts)]
            end,
    {Rows,
     Until(Applied, fun(Nd0) -> Nodes -- [Nd0] end), Until(Gone, fun(_) -> Nodes end)}.

removed_everywhere(K, T0, Nodes, Sm, WriteOps) ->
    Next = [T || {T, K2, _} <- WriteOps, K2 =:= K, T > T0],
    Limit = case Next of [] -> infinity; _ -> lists:min(Next) end,
    Ts = [case [T || {T, N, Kx, #{removed := true}} <- Sm, N =:= Nd, Kx =:= K, T >= T0,
                     T < Limit] of
              [] -> none;
              L -> lists:min(L)
          end || Nd <- Nodes],
    case lists:member(none, Ts) of
        true -> none;
        false -> lists:max(Ts)
    end.

%%% ================================================================ 4. exchange

exchange() ->
    K = 10000,
    Keys = keys(K),
    NC = group(node_clock, none, Keys),
    Merkles = [{Shape, group(merkle, Shape, Keys)} || Shape <- ?MERKLE_SHAPES],
    Rows = [{Div, nc_exchange(NC, Keys, Div),
             [{Shape, merkle_exchange(G, Keys, Div)} || {Shape, G} <- Merkles]}
            || Div <- [1, 10]],
    TRows = [{Div, tcsb_exchange(Keys, Div)} || Div <- [1, 10]],
    Meta0 = metadata(NC, node_clock_ae),
    MetaM = [{Shape, metadata(G, merkle_ae)} || {Shape, G} <- Merkles],
    Text = ["## 4. Anti-entropy metadata and traffic per exchange (Fig. 4)\n\n"
            "3 copies of 10,000 keys, quiescent (every copy has everything, contexts stripped, "
            "dot-key maps empty); then 1 % or 10 % of the keys are updated at copy a with every "
            "replication message lost, and copy b runs one anti-entropy exchange with a. "
            "Node clock: b sends its clock, a answers with the missing objects and their dots. "
            "Merkle: b sends its root, the copies descend the differing subtrees level by "
            "level, the side that gets leaf lists sends its objects of the differing keys and "
            "gets the other side's back (a key is hashed with the values reads show). "
            "Bytes are the external term format size of the messages: `objects` is the "
            "keys and objects, `sync` everything else.\n\n"
            "tcsb has no anti-entropy exchange: a copy logs every operation until it is stable "
            "and resends what a member's acknowledgement says it lacks. The same 10,000 keys "
            "and updates run on the table simulator: the keys loaded and quiescent, copy a "
            "cut off while it makes the updates (its first transmissions are lost), then the "
            "cut heals and retransmission repairs b and c. `tcsb: a and b` is every message "
            "between a and b from the heal until b has applied every update (acknowledgements "
            "and retransmissions: the counterpart of one exchange repairing b); `tcsb: whole "
            "group` every message of the three copies from the heal until the updates are "
            "stable and off every log. `objects` is the key and record of each operation "
            "retransmitted, `sync` the rest (origins, vector timestamps, hybrid clocks, "
            "acknowledgements).\n\n"
            "| divergence | anti-entropy | messages | objects sent | bytes: objects "
            "| bytes: sync | bytes: total | total vs node clock |\n"
            "|---|---|---|---|---|---|---|---|\n",
            [[row(Div, "node clock", N0, N0),
              [row(Div, io_lib:format("Merkle ~p-way, depth ~p (~s keys/leaf)",
                                      [F, D, f1(K / pow(F, D))]), M, N0)
               || {{F, D}, M} <- Ms],
              row(Div, "tcsb: a and b, until b applied the updates", TAB, N0),
              row(Div, "tcsb: whole group, until the updates are stable", TAll, N0)]
             || {{Div, N0, Ms}, {Div, {TAB, TAll, _}}} <- lists:zip(Rows, TRows)],
            io_lib:format("\nMetadata kept per copy at quiescence (external term format): node "
                          "clock, dot-key map, watermark and non-stripped keys ~p bytes; ~s.\n\n",
                          [Meta0, string:join([io_lib:format("Merkle ~p-way depth ~p: ~p bytes",
                                                              [F, D, B])
                                               || {{F, D}, B} <- MetaM], "; ")]),
            "tcsb keeps per copy its broadcast state (delivered vector, what every member "
            "acknowledged, the log of operations not yet stable) and the metadata rows of "
            "keys with unstable timestamps: ",
            string:join([io_lib:format("~p bytes at rest (~p operations logged); with ~p % "
                                       "diverged, before the heal, ~p bytes at a and ~p at b; "
                                       "b had every update ~p ms after the heal",
                                       [Rest, RestLog, Div, A, B, RepMs])
                         || {Div, {_, _, #{rest := Rest, rest_log := RestLog, a := A, b := B,
                                           repaired_ms := RepMs}}} <- TRows], "; "),
            ".\n\n"],
    {1, N1, M1} = hd(Rows),
    Best = lists:min([maps:get(total, M) || {_, M} <- M1]),
    Ratio = maps:get(total, N1) / Best,
    SyncRatio = maps:get(sync, N1) / lists:min([maps:get(sync, M) || {_, M} <- M1]),
    {Text, [{"anti-entropy bytes <= 0.2x Merkle at 1 % divergence: the protocol's own bytes "
             "(all but the keys and values of the objects repaired)",
             io_lib:format("~.3fx the Merkle shape with the fewest", [SyncRatio]), SyncRatio =< 0.2},
            {"the same, counting the objects too (Merkle repairs both ways, so ships them twice)",
             io_lib:format("~.3fx the Merkle shape with the fewest", [Ratio]), Ratio =< 0.2}]}.

pow(_, 0) -> 1;
pow(B, E) -> B * pow(B, E - 1).

row(Div, Name, #{msgs := Ms, objects := O, obj_bytes := OB, sync := Sy, total := T},
    #{total := T0}) ->
    io_lib:format("| ~p % | ~s | ~p | ~p | ~p | ~p | ~p | ~.2fx |\n",
                  [Div, Name, Ms, O, OB, Sy, T, T / T0]).

%% three copies a, b, c holding `Keys', quiescent
group(AE, Shape, Keys) ->
    Ids = [a, b, c],
    Opts = fun(Id) -> maps:merge(#{id => Id, peers => Ids, anti_entropy => AE},
                                 case Shape of none -> #{}; {F, D} -> #{merkle => #{fanout => F, depth => D}} end)
           end,
    G0 = maps:from_list([{Id, element(1, hm_dotted:new(Opts(Id)))} || Id <- Ids]),
    G1 = lists:foldl(fun({I, K}, G) ->
                             Id = lists:nth(1 + I rem 3, Ids),
                             {G2, Out} = put_at(Id, K, {v, I}, G),
                             deliver_all(Out, G2)
                     end, G0, lists:zip(lists:seq(1, length(Keys)), Keys)),
    settle(settle(G1)).

put_at(Id, K, V, G) ->
    S = maps:get(Id, G),
    {_, Ctx} = hm_dotted:get(K, S),
    {S1, Effs} = hm_dotted:put(K, V, Ctx, S),
    {G#{Id := S1}, [{To, M} || {send, To, M} <- Effs]}.

deliver_all([], G) -> G;
deliver_all([{To, M} | Rest], G) ->
    {S1, Effs} = hm_dotted:handle(M, maps:get(To, G)),
    deliver_all(Rest ++ [{T, X} || {send, T, X} <- Effs], G#{To := S1}).

%% every copy exchanges with every other, then strips
settle(G) ->
    Ids = maps:keys(G),
    G1 = lists:foldl(fun({A, B}, Gx) -> element(1, exchange_once(A, B, Gx)) end, G,
                     [{A, B} || A <- Ids, B <- Ids, A =/= B]),
    maps:map(fun(_, S) -> element(1, hm_dotted:timeout(strip, S)) end, G1).

%% one exchange started by `From' with `To'; the messages it took
exchange_once(From, To, G) ->
    S = maps:get(From, G),
    First = case hm_dotted:anti_entropy(S) of
                node_clock -> {sync_clock, From, hm_dotted:peers(S), hm_dotted:node_clock(S)};
                merkle -> {merkle, From, hm_dotted:peers(S), hm_dotted:node_clock(S),
                           hm_merkle:start(hm_dotted:tree(S))}
            end,
    run_msgs([{To, First}], G, []).

run_msgs([], G, Log) -> {G, lists:reverse(Log)};
run_msgs([{To, M} | Rest], G, Log) ->
    {S1, Effs} = hm_dotted:handle(M, maps:get(To, G)),
    run_msgs(Rest ++ [{T, X} || {send, T, X} <- Effs], G#{To := S1}, [M | Log]).

%% diverge: `Div' % of the keys updated at a, replication lost; b exchanges with a
diverge(G, Keys, Div) ->
    lists:foldl(fun(K, Gx) -> element(1, put_at(a, K, {changed, K}, Gx)) end, G,
                changed(Keys, Div)).

%% the `Div' % of the keys that diverge
changed(Keys, Div) ->
    N = length(Keys) * Div div 100,
    Step = length(Keys) div N,
    lists:sublist([lists:nth(I, Keys) || I <- lists:seq(1, length(Keys), Step)], N).

nc_exchange(G0, Keys, Div) ->
    measure(exchange_once(b, a, diverge(G0, Keys, Div))).

merkle_exchange(G0, Keys, Div) ->
    measure(exchange_once(b, a, diverge(G0, Keys, Div))).

measure({_, Msgs}) ->
    Total = lists:sum([erlang:external_size(M) || M <- Msgs]),
    ObjBytes = lists:sum([hm_dotted:object_bytes(M) || M <- Msgs]),
    Objects = lists:sum([length(element(5, M)) || M <- Msgs,
                                                 element(1, M) =:= sync_repair orelse
                                                     element(1, M) =:= merkle_repair]),
    #{msgs => length(Msgs), total => Total, obj_bytes => ObjBytes, sync => Total - ObjBytes,
      objects => Objects}.

metadata(G, Which) -> maps:get(Which, hm_dotted:metadata_bytes(maps:get(a, G))).

%%% ================================================================ 5. replication latency

replication_latency() ->
    Rows = [{AE, Loss, repl_row(AE, Loss)} || AE <- [node_clock, merkle], Loss <- [0.1, 1.0]]
        ++ [{tcsb, Loss, tcsb_repl_row(Loss)} || Loss <- [0.1, 1.0]],
    Text = ["## 5. Replication latency with message loss (Fig. 5)\n\n"
            "3 copies, 500 keys, a put every 20 ms for 10 s at a random copy, anti-entropy "
            "every 100 ms (Merkle: 16-way, depth 2, about 2 keys per leaf), network delay "
            "1-5 ms; per put and other copy, the time from the put until that copy stores its "
            "version (ms). `reached` is the share of (put, copy) pairs where the version was "
            "stored at all (a put superseded before it arrives is never stored there).\n\n"
            "tcsb: the same writes on the table simulator, first transmissions lost at 10 % or "
            "100 %; per write and other copy, the time until that copy applied it (every "
            "operation is applied at every copy, in causal order: one whose transmission was "
            "lost is resent at the origin's tick once it is 2 ticks old and the member's "
            "acknowledgement says it lacks it, and operations after it wait for it).\n\n"
            "| anti-entropy | replication loss | reached | p50 | p90 | p99 | max |\n"
            "|---|---|---|---|---|---|---|\n",
            [io_lib:format("| ~s | ~p % | ~p % | ~p | ~p | ~p | ~p |\n",
                           [case AE of
                                node_clock -> "node clock";
                                merkle -> "Merkle";
                                tcsb -> "tcsb (retransmission, 250 ms ticks)"
                            end,
                            round(L * 100), round(100 * length(Ls) / max(1, Pairs)),
                            pct(Ls, 50), pct(Ls, 90), pct(Ls, 99), pct(Ls, 100)])
             || {AE, L, {Ls, Pairs}} <- Rows], "\n"],
    {Text, []}.

repl_row(AE, Loss) ->
    {Ws, _} = writes(10, 10000, 20, keys(500), 1.0, rand:seed_s(exsss, {5, 5, 5})),
    Cfg = (base_cfg(3, 500))#{ae => AE, drop_replicate => Loss,
                              merkle => #{fanout => 16, depth => 2}},
    Res = ok_run(io_lib:format("replication ~p ~p", [AE, Loss]), hm_sim_dotted:run(Cfg, Ws)),
    Sm = samples(Res),
    First = lists:foldl(fun({T, Nd, _, #{dots := Ds}}, M) ->
                                lists:foldl(fun(D, Mx) ->
                                                    case Mx of
                                                        #{{Nd, D} := _} -> Mx;
                                                        _ -> Mx#{{Nd, D} => T}
                                                    end
                                            end, M, Ds);
                           (_, M) -> M
                        end, #{}, Sm),
    Writes = [{T0, Nd, Dot} || {write, T0, Nd, _, Dot, _} <- Sm],
    Others = fun(Nd) -> [n1, n2, n3] -- [Nd] end,
    Ls = [T - T0 || {T0, Nd, Dot} <- Writes, O <- Others(Nd), T <- [maps:get({O, Dot}, First, none)],
                    T =/= none],
    {Ls, 2 * length(Writes)}.

%%% ================================================================ tcsb: the same workloads

%% The tcsb column: one replica group of an EC table replicated by tagged causal stable
%% broadcast, on the table simulator (hm_sim:run/2: the runtime's own hm_ec_table over
%% hm_tcsb and hm_ec_key, a pawset whose keys show siblings, ram copies, the same network
%% delay), given the dotted workload's actions. Its copies tick every 250 ms as at run time
%% (acknowledgements, retransmission, stabilization): tcsb has no strip or anti-entropy
%% interval to set. Measures come from hm_sim's `probe' hook (tcsb_step/6).

tcsb_run(What, Universe, Seed, Dur, Loss, ProbeOpts, Trace) ->
    Nodes = hm_sim:nodes_of(Universe),
    Cfg = #{n => Universe, type => pawset, policy => siblings, storage => ram, drop => 0.0,
            dup => 0.0, delay => 5, duration => Dur + ?TCSB_START, seed => Seed,
            skew => maps:from_list([{Nd, 0} || Nd <- Nodes]), drop_replicate => Loss,
            probe => tcsb_probe(ProbeOpts)},
    #{stats := St} = ok_run(What, hm_sim:run(Cfg, Trace)),
    case maps:get(ops_refused, St, 0) + maps:get(ops_skipped, St, 0) of
        0 -> ok;
        Refused -> io:format("~s: ~p writes refused or skipped~n", [What, Refused])
    end,
    maps:get(probe, St).

%% dotted_bench's actions as hm_sim's, `?TCSB_START' ms later: `{op_i, I, K, put | delete}'
%% at the I-th copy of the group as it is then (every put writes a value of its own);
%% `{replace, I}': that copy is removed for good (hypermnesia:del_table_copy/2) and a copy on
%% a new node added (add_table_copy/3: it starts empty and takes a snapshot). Returns the
%% trace, the number of nodes used and the members at the end.
tcsb_trace(N, Acts) ->
    {Out, Nodes, Next, _} =
        lists:foldl(
          fun({T0, A}, {Acc, Ns, Nx, V}) ->
                  T = T0 + ?TCSB_START,
                  At = fun(I) -> lists:nth(1 + (I - 1) rem length(Ns), Ns) end,
                  case A of
                      {op_i, I, K, put} ->
                          {[{T, {op, At(I), K, {write, {v, V}}}} | Acc], Ns, Nx, V + 1};
                      {op_i, I, K, delete} -> {[{T, {op, At(I), K, delete}} | Acc], Ns, Nx, V};
                      {replace, I} ->
                          Old = At(I),
                          New = list_to_atom("n" ++ integer_to_list(Nx)),
                          {[{T, {add, New}}, {T, {remove, Old}} | Acc], (Ns -- [Old]) ++ [New],
                           Nx + 1, V}
                  end
          end, {[], hm_sim:nodes_of(N), N + 1, 1}, Acts),
    {lists:reverse(Out), Next - 1, Nodes}.

%% hm_sim's probe: `ev' collects, newest first,
%%   {write, T, Node, Key, Dot, put | delete}: an operation made at its origin;
%%   {applied, T, Node, Dot}: a member's operation applied at another copy;
%%   {clock, T, Node, Key, KeyTimestamps, VectorEntries}: after an operation was applied, the
%%     timestamps its key keeps (hm_ec_key:timestamps/1) and the entries of its vector
%%     timestamp (logged with it until stable);
%%   {folded, T, Node, Dot}: a write whose version the copy shows lost its timestamp (its
%%     key was stabilized: no timestamp left on it);
%%   {gone, T, Node, Dot}: a delete stabilized at the copy (off its log);
%% `last' the state of every copy after its last step; `at' the state of every copy as it
%% was at each time of option `marks'; `sent' (option `bytes_from' T: from T until every
%% copy's log is empty) {T, From, To, Msg} of every message sent.
tcsb_probe(Opts) ->
    From = maps:get(bytes_from, Opts, infinity),
    {fun(Now, Nd, Effs, R, A) -> tcsb_step(Now, Nd, Effs, R, A, From) end,
     #{info => #{}, ev => [], last => #{}, marks => lists:sort(maps:get(marks, Opts, [])),
       at => #{}, sent => [], sending => From =/= infinity}}.

tcsb_step(Now, Nd, Effs, R, A0 = #{info := Info0, ev := Ev0, last := Last, at := At}, From) ->
    %% the state at a mark is the state after the last step before it
    At1 = case maps:find(Nd, Last) of
              {ok, Prev} -> lists:foldl(fun(T, Acc) when T < Now, not is_map_key({T, Nd}, Acc) ->
                                                Acc#{{T, Nd} => Prev};
                                           (_, Acc) -> Acc
                                        end, At, maps:get(marks, A0));
              error -> At
          end,
    St = hm_ec_table:store(R),
    {Info, Ev} =
        lists:foldl(
          fun({event, {applied, {O = {ON, _}, Ts, {_, K, Op}}}}, {I, E}) ->
                  Dot = {O, maps:get(O, Ts)},
                  Clock = {clock, Now, Nd, K, key_timestamps(K, St), map_size(Ts)},
                  case ON =:= Nd of
                      true -> {I#{Dot => {K, Op}},
                               [Clock, {write, Now, Nd, K, Dot, op_kind(Op)} | E]};
                      false -> {I, [Clock, {applied, Now, Nd, Dot} | E]}
                  end;
             ({event, {stabilized, Dots}}, {I, E}) ->
                  {I, lists:foldl(fun(D, Ex) ->
                                          stabilized(Now, Nd, D, maps:get(D, I, none), R, St, Ex)
                                  end, E, Dots)};
             (_, Acc) -> Acc
          end, {Info0, Ev0}, Effs),
    Last1 = Last#{Nd => R},
    A = A0#{info := Info, ev := Ev, last := Last1, at := At1},
    case maps:get(sending, A) andalso Now >= From of
        true ->
            Sent = [{Now, Nd, To, M} || {send, To, M} <- Effs] ++ maps:get(sent, A),
            Idle = lists:all(fun(X) -> hm_tcsb:log_size(hm_ec_table:tcsb(X)) =:= 0 end,
                             maps:values(Last1)),
            A#{sent := Sent, sending := not Idle};
        false -> A
    end.

%% the state of copy `Nd' at mark `T' (its last state if it made no step after `T')
at(#{at := At, last := Last}, T, Nd) ->
    case At of
        #{{T, Nd} := R} -> R;
        _ -> maps:get(Nd, Last)
    end.

op_kind({write, _, _}) -> put;
op_kind(_) -> delete.

key_timestamps(K, St) ->
    case hm_ec_store:meta_get(K, St) of
        {ok, KS} -> hm_ec_key:timestamps(KS);
        none -> 0
    end.

stabilized(Now, Nd, D, {K, {write, Rec, _}}, R, St, Ev) ->
    Held = case hm_ec_store:meta_get(K, St) of
               {ok, {_, Log}} -> lists:keymember(D, 1, Log);
               none -> false
           end,
    case not Held andalso lists:member(Rec, hm_ec_table:read(K, R)) of
        true -> [{folded, Now, Nd, D} | Ev];
        false -> Ev
    end;
stabilized(Now, Nd, D, {_, delete}, _, _, Ev) -> [{gone, Now, Nd, D} | Ev];
stabilized(_, _, _, _, _, _, Ev) -> Ev.

%% the first time of each `{Tag, T, Node, Dot}' event per (Node, Dot)
firsts(Tag, Ev) ->
    lists:foldl(fun(E, M) when element(1, E) =:= Tag ->
                        {_, T, Nd, D} = E,
                        case M of
                            #{{Nd, D} := T0} when T0 =< T -> M;
                            _ -> M#{{Nd, D} => T}
                        end;
                   (_, M) -> M
                end, #{}, Ev).

tcsb_writes(#{ev := Ev}) -> lists:reverse([W || W <- Ev, element(1, W) =:= write]).

%% 1. churn: the dotted workload and replacements on tcsb
tcsb_churn_row(N) ->
    Keys = keys(200),
    {Ws, _} = writes(10, 20000, 10, Keys, 1.0, rand:seed_s(exsss, {N, 1, 1})),
    Churn = [{T, {replace, I}} || {T, I} <- lists:zip(lists:seq(1000, 20000, 1000),
                                                       [1 + (X rem N) || X <- lists:seq(1, 20)])],
    {Trace, U, Final} = tcsb_trace(N, lists:keysort(1, Ws ++ Churn)),
    P = #{ev := Ev, last := Last} =
        tcsb_run(io_lib:format("tcsb churn N=~p", [N]), U, 100 + N, 20001, 0.1, #{}, Trace),
    Clocks = [{T - ?TCSB_START, KT, VE} || {clock, T, _, _, KT, VE} <- Ev],
    Windows = lists:seq(0, 18000, 2000),
    Win = [mean([KT || {T, KT, _} <- Clocks, T >= W, T < W + 2000]) || W <- Windows],
    VWin = [mean([VE || {T, _, VE} <- Clocks, T >= W, T < W + 2000]) || W <- Windows],
    Finals = [maps:get(Nd, Last) || Nd <- Final],
    %% after quiescence: the timestamps of every key each copy stores
    After = lists:append([[key_timestamps(K, hm_ec_table:store(R))
                           || K <- lists:usort([element(2, Rec) || Rec <- hm_ec_table:rows(R)]
                                               ++ hm_ec_store:meta_keys(hm_ec_table:store(R)))]
                          || R <- Finals]),
    DV = lists:max([map_size(hm_tcsb:delivered(hm_ec_table:tcsb(R))) || R <- Finals]),
    Writes = tcsb_writes(P),
    Writers = lists:foldl(fun({write, _, Nd, K, _, _}, M) ->
                                  M#{K => lists:usort([Nd | maps:get(K, M, [])])}
                          end, #{}, Writes),
    VV = [length(W) || W <- maps:values(Writers)],
    Ids = length(lists:usort([Nd || {write, _, Nd, _, _, _} <- Writes])),
    {N, length([x || {_, {remove, _}} <- Trace]), Win, mean(After), lists:max([0 | After]),
     mean(VV), lists:max([0 | VV]), Ids, VWin, DV}.

%% 4. the same divergence on tcsb: `Keys' loaded (2 writes a ms, round robin over the
%% copies), quiescent; copy a (n1) cut off at 7 s, the `Div' % of the keys dotted changes
%% updated at a (1 a ms), the cut healed at the end of the work phase: retransmission repairs
%% b (n2) and c (n3). Messages from the heal until every copy's log is empty: between a and b
%% until b has applied every update (the counterpart of one exchange repairing b), and in
%% the whole group until the updates are stable everywhere; the metadata a copy keeps at
%% rest (before the cut) and with the divergence (before the heal).
tcsb_exchange(Keys, Div) ->
    Nodes = [n1, n2, n3],
    Load = [{I div 2, {op, lists:nth(1 + I rem 3, Nodes), K, {write, {v, I}}}}
            || {I, K} <- lists:zip(lists:seq(1, length(Keys)), Keys)],
    Changed = changed(Keys, Div),
    Cut = 7000,
    Heal = Cut + 2000,
    Trace = [{T + ?TCSB_START, A} || {T, A} <- Load]
        ++ [{Cut, {partition, isolated, [[n1], [n2, n3]]}}]
        ++ [{Cut + I, {op, n1, K, {write, {changed, K}}}}
            || {I, K} <- lists:zip(lists:seq(0, length(Changed) - 1), Changed)],
    P = #{ev := Ev, sent := Sent} =
        tcsb_run(io_lib:format("tcsb exchange ~p %", [Div]), 3, 400 + Div, Heal - ?TCSB_START, 0.0,
                 #{marks => [Cut - 1, Heal - 1], bytes_from => Heal}, Trace),
    Updates = [D || {write, T, n1, _, D, put} <- tcsb_writes(P), T >= Cut],
    Applied = firsts(applied, Ev),
    Repaired = lists:max([maps:get({n2, D}, Applied) || D <- Updates]),
    AB = [M || {T, F, To, M} <- Sent, T =< Repaired,
               {F, To} =:= {n1, n2} orelse {F, To} =:= {n2, n1}],
    Meta = fun(T, Nd) -> R = at(P, T, Nd),
                         erlang:external_size(hm_ec_table:tcsb(R))
                             + erlang:external_size(hm_ec_store:meta_rows(hm_ec_table:store(R)))
           end,
    Rest = at(P, Cut - 1, n1),
    {tcsb_bytes(AB), tcsb_bytes([M || {_, _, _, M} <- Sent]),
     #{rest => Meta(Cut - 1, n1), rest_log => hm_tcsb:log_size(hm_ec_table:tcsb(Rest)),
       a => Meta(Heal - 1, n1), b => Meta(Heal - 1, n2), repaired_ms => Repaired - Heal}}.

%% the messages' bytes, split as the dotted rows are: `objects' the keys and records of the
%% operations retransmitted, `sync' everything else (origins, vector timestamps, hybrid
%% clocks, acknowledgements)
tcsb_bytes(Msgs) ->
    Objs = [[{K, Rec} || {_, _, {_, K, {write, Rec, _}}} <- L] || {ops, L} <- Msgs],
    Total = lists:sum([erlang:external_size(M) || M <- Msgs]),
    ObjBytes = lists:sum([erlang:external_size(O) || O <- Objs]),
    #{msgs => length(Msgs), total => Total, obj_bytes => ObjBytes, sync => Total - ObjBytes,
      objects => length(lists:append(Objs))}.

%% 5. the same writes on tcsb: until each other copy applied them
tcsb_repl_row(Loss) ->
    {Ws, _} = writes(10, 10000, 20, keys(500), 1.0, rand:seed_s(exsss, {5, 5, 5})),
    {Trace, U, _} = tcsb_trace(3, Ws),
    P = #{ev := Ev} = tcsb_run(io_lib:format("tcsb replication ~p", [Loss]), U, 500, 10000, Loss,
                               #{}, Trace),
    Applied = firsts(applied, Ev),
    Writes = tcsb_writes(P),
    Ls = [T - T0 || {write, T0, Nd, _, Dot, _} <- Writes, O <- [n1, n2, n3] -- [Nd],
                    T <- [maps:get({O, Dot}, Applied, none)], T =/= none],
    {Ls, 2 * length(Writes)}.

%% The ideal object count at time `T': keys whose last write by then (`{Time, Key, put |
%% delete}') is a put (immediate removal on delete).
ideal(T, WriteOps) ->
    M = lists:foldl(fun({Tw, K, Op}, A) when Tw =< T -> A#{K => Op};
                       (_, A) -> A
                    end, #{}, WriteOps),
    length([x || put <- maps:values(M)]).
