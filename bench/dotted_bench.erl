%% @doc DottedDB's evaluation shapes (*DottedDB: Anti-Entropy without Merkle Trees, Deletes
%% without Tombstones*, §V) on the pure cores {@link hm_dotted} and {@link hm_merkle}, in one
%% VM: the time-dependent experiments run on the deterministic simulator's network model
%% ({@link hm_sim_dotted}, simulated milliseconds), the per-exchange ones call the cores
%% directly. `make bench-dotted' writes `bench/results/dotted-<yyyymmdd-hhmm>.md'.
%%
%% Experiments (each names the paper's figure or table it follows):
%% <ol>
%% <li>clock entries per key under churn (Fig. 1): one copy replaced every second, writes
%% every 10 ms at random copies (read, modify, write), N = 3 and N = 6; the mean number of
%% node ids in the clocks written to storage per 2 s window, and per stored key after
%% quiescence, next to what per-key version vectors that never drop an entry would hold;</li>
%% <li>strip latency (Fig. 2): anti-entropy every 100 ms, strip every 100 ms, 1 s or 5 s,
%% replication messages lost at 10 % or 100 %: time from a put to the moment each copy stores
%% its object with an empty context;</li>
%% <li>object count under 50 % deletes (Fig. 3): 2,000 keys loaded, then 100 operations per
%% second, half puts and half deletes; stored objects at one copy against the ideal (keys
%% with a value), and per delete the time until every copy has physically removed the key,
%% against the strip interval (2.5 s);</li>
%% <li>anti-entropy metadata and traffic per exchange (Fig. 4): 10,000 keys on 3 copies,
%% 1 % or 10 % of them then updated at one copy with replication lost, one exchange from a
%% lagging copy: bytes (external term format) split into object data and synchronisation
%% metadata, and the metadata each copy keeps, node clock against Merkle trees of 16-way
%% fan-out and depth 1 to 4;</li>
%% <li>replication latency with message loss (Fig. 5): time from a put at its coordinator to
%% its version stored at each other copy, replication loss 10 % and 100 %, node-clock and
%% Merkle anti-entropy every 100 ms.</li>
%% </ol>
%% Targets reported as met or missed: anti-entropy bytes at most 0.2x Merkle's at 1 %
%% divergence; at most 2 clock entries per key after churn at N = 3; deleted keys physically
%% gone within 2x the strip interval.
-module(dotted_bench).

-export([main/1]).

-define(MERKLE_SHAPES, [{16, 1}, {16, 2}, {16, 3}, {16, 4}]).

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
             "# DottedDB replication and the Merkle baseline: run ~s\n\n"
             "Produced by `make bench-dotted` (`bench/dotted_bench.erl`, OTP ~s, ~p s of wall "
             "time). Time-dependent figures are simulated milliseconds of the deterministic "
             "simulator's network (`sim/hm_sim_dotted.erl`, seeded): they are the same on every "
             "machine. Byte counts are the external term format size of the messages.\n\n"
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

pct(L, P) when L =/= [] ->
    S = lists:sort(L),
    lists:nth(max(1, min(length(S), round(P / 100 * length(S)))), S);
pct([], _) -> na.

mean([]) -> 0.0;
mean(L) -> lists:sum(L) / length(L).

f1(X) when is_float(X) -> io_lib:format("~.2f", [X]);
f1(X) -> io_lib:format("~p", [X]).

%%% ================================================================ 1. churn

churn() ->
    Rows = [churn_row(N) || N <- [3, 6]],
    Text = ["## 1. Clock entries per key under churn (Fig. 1)\n\n"
            "200 keys, a write every 10 ms at a random copy (get, then put with its context), "
            "one copy replaced by a new node id every second for 20 s (the new copy takes a "
            "handoff), replication loss 10 %, anti-entropy every 100 ms, strip every 250 ms. "
            "`stored clocks` is the mean number of node ids in the clock of every object "
            "written to storage in each 2 s window; `after` is per stored key once the group "
            "is quiescent; `per-key VV` is what a version vector per key that never drops an "
            "entry (MerkleDB's dotted version vectors) would hold at the end: every node id "
            "that ever wrote the key.\n\n"
            "| N | replaced | stored clocks, mean per 2 s window | after: mean / max "
            "| per-key VV: mean / max | ids ever |\n"
            "|---|---|---|---|---|---|\n",
            [io_lib:format("| ~p | ~p | ~s | ~s / ~p | ~s / ~p | ~p |\n",
                           [N, Rep, string:join([f1(W) || W <- Win], ", "), f1(AM), AX,
                            f1(VM), VX, Ids])
             || {N, Rep, Win, AM, AX, VM, VX, Ids} <- Rows], "\n"],
    {3, _, _, AM3, AX3, _, _, _} = hd(Rows),
    {Text, [{"<= 2 clock entries per key after churn at N = 3",
             io_lib:format("mean ~s, max ~p", [f1(AM3), AX3]), AX3 =< 2}]}.

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
    Rows = [{StripMs, Loss, strip_row(StripMs, Loss)} || StripMs <- [100, 1000, 5000],
                                                         Loss <- [0.1, 1.0]],
    Text = ["## 2. Strip latency (Fig. 2)\n\n"
            "3 copies, 100 keys, a put every 20 ms for 10 s at a random copy, anti-entropy every "
            "100 ms; per put and copy, the time from the put until that copy stores the object "
            "with an empty context (ms). Puts superseded at a copy before it stripped them are "
            "not counted there.\n\n"
            "| strip interval | replication loss | samples | p50 | p90 | p99 | max |\n"
            "|---|---|---|---|---|---|---|\n",
            [io_lib:format("| ~p ms | ~p % | ~p | ~p | ~p | ~p | ~p |\n",
                           [St, round(L * 100), length(Ls), pct(Ls, 50), pct(Ls, 90),
                            pct(Ls, 99), pct(Ls, 100)])
             || {St, L, Ls} <- Rows], "\n"],
    {Text, []}.

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
    Ideal = fun(T) ->
                    M = lists:foldl(fun({Tw, K, Op}, A) when Tw =< T -> A#{K => Op};
                                       (_, A) -> A
                                    end, #{}, WriteOps),
                    length([x || put <- maps:values(M)])
            end,
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
    Text = ["## 3. Objects stored under 50 % deletes (Fig. 3)\n\n"
            "3 copies, 2,000 keys loaded in the first 2 s, then from 3 s to 23 s an operation "
            "every 10 ms at a random copy, half puts and half deletes of random keys (each with "
            "the context of a get at that copy), replication loss 10 %, anti-entropy every "
            "100 ms, strip every 2.5 s. Stored objects at one copy against the ideal (keys with "
            "a value: immediate removal); a per-key clock kept as a tombstone would keep all "
            "2,000.\n\n| time (s) | ideal | stored |\n|---|---|---|\n",
            [io_lib:format("| ~p | ~p | ~p |\n", [T div 1000, I, S]) || {T, I, S} <- Rows],
            io_lib:format("\nTime from a delete until every copy has physically removed the key "
                          "(~p deletes): p50 ~p ms, p90 ~p ms, p99 ~p ms, max ~p ms "
                          "(strip interval ~p ms).\n\n",
                          [length(Gone), pct(Gone, 50), pct(Gone, 90), pct(Gone, 99), Max,
                           StripMs])],
    {Text, [{"deleted keys physically gone within 2x the strip interval",
             io_lib:format("max ~p ms, p99 ~p ms for a strip interval of ~p ms", [Max, pct(Gone, 99), StripMs]),
             is_integer(Max) andalso Max =< 2 * StripMs}]}.

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
            "| divergence | anti-entropy | messages | objects sent | bytes: objects "
            "| bytes: sync | bytes: total | total vs node clock |\n"
            "|---|---|---|---|---|---|---|---|\n",
            [[row(Div, "node clock", N0, N0),
              [row(Div, io_lib:format("Merkle ~p-way, depth ~p (~s keys/leaf)",
                                      [F, D, f1(K / pow(F, D))]), M, N0)
               || {{F, D}, M} <- Ms]]
             || {Div, N0, Ms} <- Rows],
            io_lib:format("\nMetadata kept per copy at quiescence (external term format): node "
                          "clock, dot-key map, watermark and non-stripped keys ~p bytes; ~s.\n\n",
                          [Meta0, string:join([io_lib:format("Merkle ~p-way depth ~p: ~p bytes",
                                                              [F, D, B])
                                               || {{F, D}, B} <- MetaM], "; ")])],
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
    N = length(Keys) * Div div 100,
    Step = length(Keys) div N,
    Changed = [lists:nth(I, Keys) || I <- lists:seq(1, length(Keys), Step)],
    lists:foldl(fun(K, Gx) -> element(1, put_at(a, K, {changed, K}, Gx)) end, G,
                lists:sublist(Changed, N)).

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
    Rows = [{AE, Loss, repl_row(AE, Loss)} || AE <- [node_clock, merkle], Loss <- [0.1, 1.0]],
    Text = ["## 5. Replication latency with message loss (Fig. 5)\n\n"
            "3 copies, 500 keys, a put every 20 ms for 10 s at a random copy, anti-entropy "
            "every 100 ms (Merkle: 16-way, depth 2, about 2 keys per leaf), network delay "
            "1-5 ms; per put and other copy, the time from the put until that copy stores its "
            "version (ms). `reached` is the share of (put, copy) pairs where the version was "
            "stored at all (a put superseded before it arrives is never stored there).\n\n"
            "| anti-entropy | replication loss | reached | p50 | p90 | p99 | max |\n"
            "|---|---|---|---|---|---|---|\n",
            [io_lib:format("| ~s | ~p % | ~p % | ~p | ~p | ~p | ~p |\n",
                           [case AE of node_clock -> "node clock"; merkle -> "Merkle" end,
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
