%% @doc `make bench-access': what the `async_ec' access path costs per call on one node, as
%% ratios against Mnesia's own `async_dirty' in the same run: a read and a write of a plain
%% table under `async_dirty', the same plain table read and written inside `async_ec' (a
%% table that is not an EC table must cost what it costs under `async_dirty': the access
%% module only asks whether it is an EC table), and an EC table read and written under
%% `async_ec'. Each figure is the median of 5 rounds of 100,000 calls on 1,000 keys, in ns
%% per call. Then the table core alone ({@link hm_ec_table}, in this process, on the EC
%% table's own storage): applying another member's write (what every copy does for every
%% write made elsewhere, and what a copy replays after a partition heals), and a local
%% write, and a write's whole life on three copies (made at one, delivered at the two others,
%% acknowledged and made stable at all three: the protocol's own cost per write, without
%% processes, messages or a network), against one `mnesia:dirty_write/1' of a plain table:
%% median of 5 rounds of 30,000 operations. Last, catching up by state after a cut (see
%% catch_up_rows/0): the state that carries only the keys the cut's writes touched
%% against the whole state, in bytes and in the reductions to build and to join it.
%% Writes `bench/results/access-<yyyymmdd-hhmm>.md'.
-module(access_bench).

-export([main/1]).

-define(N, 100000).
-define(ROUNDS, 5).
-define(CORE_N, 30000).

-spec main([string()]) -> no_return().
main([Out]) ->
    Dir = filename:join(case os:getenv("TMPDIR") of false -> "/tmp"; T -> T end,
                        "hm_access_bench_" ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    ok = application:set_env(mnesia, dir, Dir),
    ok = mnesia:create_schema([node()]),
    ok = hypermnesia:start(),
    {atomic, ok} = hypermnesia:create_table(ect, [{type, pawset}, {attributes, [k, v]},
                                                  {ram_copies, [node()]}]),
    {atomic, ok} = mnesia:create_table(plt, [{attributes, [k, v]}, {ram_copies, [node()]}]),
    [begin
         ok = hypermnesia:async_ec(fun() -> mnesia:write({ect, K, K}) end),
         ok = mnesia:async_dirty(fun() -> mnesia:write({plt, K, K}) end)
     end || K <- lists:seq(1, 1000)],
    Rows = [{"read, plain table, async_dirty", fun(K) -> mnesia:async_dirty(fun() -> mnesia:read(plt, K) end) end},
            {"read, plain table, async_ec", fun(K) -> hypermnesia:async_ec(fun() -> mnesia:read(plt, K) end) end},
            {"read, EC table, async_ec", fun(K) -> hypermnesia:async_ec(fun() -> mnesia:read(ect, K) end) end},
            {"write, plain table, async_dirty", fun(K) -> mnesia:async_dirty(fun() -> mnesia:write({plt, K, x}) end) end},
            {"write, plain table, async_ec", fun(K) -> hypermnesia:async_ec(fun() -> mnesia:write({plt, K, x}) end) end},
            {"write, EC table, async_ec", fun(K) -> hypermnesia:async_ec(fun() -> mnesia:write({ect, K, x}) end) end}],
    Measured = [{Name, hm_bench_stats:lower_median([per_call(F) || _ <- lists:seq(1, ?ROUNDS)])} || {Name, F} <- Rows],
    Core = core_rows(),
    CatchUp = catch_up_rows(),
    Base = fun(Kind) -> proplists:get_value(Kind ++ ", plain table, async_dirty", Measured) end,
    %% the run's id is its file's name (the Makefile dates it when the run starts)
    Id = filename:basename(Out, ".md"),
    Text = [io_lib:format("# The async_ec access path on one node (run ~s)~n~n"
                          "`make bench-access`: median of ~p rounds of ~p calls, ns per call; "
                          "host: ~p schedulers, load average ~s.~n~n"
                          "| call | ns | / async_dirty |~n|---|---|---|~n",
                          [Id, ?ROUNDS, ?N, erlang:system_info(schedulers_online),
                           string:trim(os:cmd("cut -d' ' -f1-3 /proc/loadavg"))]),
            [io_lib:format("| ~s | ~p | ~.2f |~n",
                           [Name, Ns, Ns / Base(hd(string:split(Name, ",")))])
             || {Name, Ns} <- Measured],
            io_lib:format("~n## The table core alone~n~n"
                          "Median of ~p rounds of ~p operations on 1,000 keys, ns per operation.~n~n"
                          "| step | ns | / dirty_write |~n|---|---|---|~n", [?ROUNDS, ?CORE_N]),
            [io_lib:format("| ~s | ~p | ~.2f |~n",
                           [Name, Ns, Ns / proplists:get_value("mnesia:dirty_write, plain table", Core)])
             || {Name, Ns} <- Core],
            io_lib:format("~n## Catching up by state~n~n"
                          "A table of R rows, stable on two copies; then one copy makes W writes "
                          "(a fifth of them deletes) on K of its keys, and the other, behind by more "
                          "than its rows, asks for its state. The state that carries only the keys "
                          "the writes touched, and the whole state, built by the first copy (in "
                          "maps) and joined by the second (on the EC table's storage): its size "
                          "(`term_to_binary`), and the reductions to build and to join it.~n~n"
                          "| R rows, W writes, K keys | state | KB | build, M reductions | "
                          "join, M reductions |~n|---|---|---|---|---|~n", []),
            [io_lib:format("| ~p, ~p, ~p | ~s | ~p | ~.2f | ~.2f |~n",
                           [R, W, K, Kind, Bytes div 1024, Build / 1.0e6, Join / 1.0e6])
             || {{R, W, K}, Kind, Bytes, Build, Join} <- CatchUp]],
    ok = file:write_file(Out, Text),
    io:format("~s~nwrote ~s~n", [Text, Out]),
    _ = mnesia:stop(),
    _ = file:del_dir_r(Dir),
    halt(0).

%% The core's steps, each round on a fresh pair of replicas: `b' (in maps) makes the writes,
%% `a' (this node, on the EC table `ect''s storage) applies them, then makes as many itself.
core_rows() ->
    Rounds = [core_round(R) || R <- lists:seq(1, ?ROUNDS)],
    [{Name, hm_bench_stats:lower_median([maps:get(Name, R) || R <- Rounds])}
     || Name <- ["apply another member's write", "local write",
                 "a write's whole life on three copies", "mnesia:dirty_write, plain table"]].

core_round(Round) ->
    Members = [node(), 'b@core'],
    Opts = fun(Node, Store) ->
                   #{tab => ect, type => pawset, policy => term_order, record => {ect, 3},
                     cookie => core, node => Node, incarnation => Round, members => Members,
                     store => Store}
           end,
    {ok, #{meta := Meta, log := Log}} = hypermnesia:ec_options(ect),
    {A0, _} = hm_ec_table:new(Opts(node(), hm_ec_store_mnesia:new(ect, Meta, Log, ram_copies))),
    {B0, _} = hm_ec_table:new(Opts('b@core', hm_ec_store_map:new(set, ram))),
    {A, _} = hm_ec_table:handle('b@core', core, {snapshot_empty}, A0),
    {B, _} = hm_ec_table:handle(node(), core, {snapshot_empty}, B0),
    {_, Msgs} = lists:foldl(fun(I, {Bx, Acc}) ->
                                    K = I rem 1000 + 1,
                                    {By, Effs} = hm_ec_table:submit({K, {write, {ect, K, I}}},
                                                                    async, x, {I, []}, Bx),
                                    {By, [M || {send, _, {op, M}} <- Effs] ++ Acc}
                            end, {B, []}, lists:seq(1, ?CORE_N)),
    Ops = lists:reverse(Msgs),
    Ns = fun(F) -> {Us, R} = timer:tc(F), {Us * 1000 div ?CORE_N, R} end,
    {Apply, A1} = Ns(fun() ->
                             lists:foldl(fun(M, Ax) ->
                                                 element(1, hm_ec_table:handle('b@core', core,
                                                                               {op, M}, Ax))
                                         end, A, Ops)
                     end),
    {Local, _} = Ns(fun() ->
                            lists:foldl(fun(I, Ax) ->
                                                K = I rem 1000 + 1,
                                                element(1, hm_ec_table:submit(
                                                             {K, {write, {ect, K, I}}}, async, x,
                                                             {I, ['b@core']}, Ax))
                                        end, A1, lists:seq(1, ?CORE_N))
                    end),
    {Dirty, _} = Ns(fun() ->
                            [mnesia:dirty_write({plt, I rem 1000 + 1, I})
                             || I <- lists:seq(1, ?CORE_N)]
                    end),
    #{"apply another member's write" => Apply, "local write" => Local,
      "a write's whole life on three copies" => life(Round),
      "mnesia:dirty_write, plain table" => Dirty}.

%% Catching up by state (hm_ec_table:merge_state/2) for a few tables and cuts: both states
%% the member can build, the one that leaves out the keys the copy has and the whole one.
catch_up_rows() ->
    {atomic, ok} = hypermnesia:create_table(ecc, [{type, pawset}, {attributes, [k, v]},
                                                  {ram_copies, [node()]}]),
    {ok, #{meta := Meta, log := Log}} = hypermnesia:ec_options(ecc),
    [catch_up_case(Cfg, Whole, Meta, Log)
     || Cfg <- [{50000, 60000, 2000}, {50000, 60000, 20000}, {20000, 30000, 20000}],
        Whole <- [false, true]].

catch_up_case({R, W, K}, Whole, Meta, Log) ->
    Opts = fun(Node, Store) ->
                   #{tab => ecc, type => pawset, policy => term_order, record => {ecc, 3},
                     cookie => core, node => Node, incarnation => 1, members => [Node],
                     store => Store, catch_up => 1}
           end,
    Core = fun(Node, Store) ->
                   {T, _} = hm_ec_table:new(Opts(Node, Store)),
                   hm_ec_table:set_members([node(), 'b@core'], T)
           end,
    {A0, B0} = {Core(node(), hm_ec_store_mnesia:new(ecc, Meta, Log, ram_copies)),
                Core('b@core', hm_ec_store_map:new(set, ram))},
    Submit = fun(KOp, {Bx, Sent}) ->
                     {By, E} = hm_ec_table:submit(KOp, async, x, {0, []}, Bx),
                     {By, [M || {send, _, {op, M}} <- E] ++ Sent}
             end,
    {B1, Sent} = lists:foldl(fun(I, Acc) -> Submit({I, {write, {ecc, I, base}}}, Acc) end,
                             {B0, []}, lists:seq(1, R)),
    {A1, _} = hm_ec_table:handle('b@core', core, {ops, lists:reverse(Sent)}, A0),
    Ack = fun(From, N, To) ->
                  B = hm_ec_table:tcsb(From),
                  hm_ec_table:handle(N, core, {ack, hm_tcsb:self(B), hm_tcsb:delivered(B), #{}},
                                     To)
          end,
    %% both acknowledge everything: stable, folded
    A2 = element(1, hm_ec_table:acknowledge(['b@core'], element(1, Ack(B1, 'b@core', A1)))),
    B2 = element(1, hm_ec_table:acknowledge([node()], element(1, Ack(A2, node(), B1)))),
    {B3, _} = lists:foldl(fun(I, Acc) ->
                                  Key = I rem K + 1,
                                  Op = case I rem 5 of
                                           0 -> delete;
                                           _ -> {write, {ecc, Key, I}}
                                       end,
                                  Submit({Key, Op}, Acc)
                          end, {B2, []}, lists:seq(1, W)),
    {A3, E3} = Ack(B3, 'b@core', A2),
    [{merge_req, V}] = [Req || {send, _, Req = {merge_req, _}} <- E3],
    %% a request from a copy that lacks what the member folded gets the whole state
    Reds = fun(F) ->
                   {reductions, R0} = process_info(self(), reductions),
                   Res = F(),
                   {reductions, R1} = process_info(self(), reductions),
                   {R1 - R0, Res}
           end,
    {Build, {_, E4}} = Reds(fun() ->
                                    hm_ec_table:handle(node(), core,
                                                       {merge_req, case Whole of
                                                                       true -> #{};
                                                                       false -> V
                                                                   end}, B3)
                            end),
    [State = {merge, #{rows := SR}}] = [S || {send, _, S = {merge, _}} <- E4],
    {Join, {A4, _}} = Reds(fun() -> hm_ec_table:handle('b@core', core, State, A3) end),
    1 = maps:get(state_catch_ups, hm_ec_table:info([], A4)),
    ok = clear(A4),
    Kind = case SR of
               {left_out, _, _} -> "the keys touched";
               _ -> "whole"
           end,
    {{R, W, K}, Kind, byte_size(term_to_binary(State)), Build, Join}.

%% Empty the EC table's storage for the next case, and drop its metadata table.
clear(T) ->
    St = hm_ec_table:store(T),
    _ = [hm_ec_store:delete(Key, St) || Key <- hm_ec_store:all_keys(St)],
    hm_ec_store_mnesia:forget(St).

%% Three copies' cores in this process (their storage in maps): each makes 50 writes in turn,
%% the other two deliver them, then each ticks (acknowledgements, stabilization) and the
%% acknowledgements are delivered; until ?CORE_N writes are made and stable everywhere. Ns
%% per write, the three copies' work together: what the protocol itself costs a write,
%% without processes, messages or a network.
life(Round) ->
    Nodes = ['a@core', 'b@core', 'c@core'],
    New = fun(N) ->
                  {T0, _} = hm_ec_table:new(#{tab => ect, type => pawset, policy => term_order,
                                              record => {ect, 3}, cookie => core, node => N,
                                              incarnation => Round, members => Nodes,
                                              store => hm_ec_store_map:new(set, ram)}),
                  lists:foldl(fun(F, T) ->
                                      element(1, hm_ec_table:handle(F, core, {snapshot_empty}, T))
                              end, T0, Nodes -- [N])
          end,
    Ts0 = maps:from_list([{N, New(N)} || N <- Nodes]),
    Batch = 50,
    Deliver = fun Deliver([], Ts) -> Ts;
                  Deliver(Sends, Ts) ->
                      {Ts1, More} = lists:foldl(
                                      fun({From, To, Msg}, {Tx, S}) ->
                                              {T, Effs} = hm_ec_table:handle(From, core, Msg,
                                                                             maps:get(To, Tx)),
                                              {Tx#{To := T}, S ++ [{To, D, M} || {send, D, M} <- Effs]}
                                      end, {Ts, []}, Sends),
                      Deliver(More, Ts1)
              end,
    Round1 = fun(I0, Ts) ->
                     {Ts1, Sends, _} =
                         lists:foldl(
                           fun(N, {Tx, S, I}) ->
                                   {T, E} = lists:foldl(
                                              fun(J, {Ty, Ey}) ->
                                                      K = J rem 1000 + 1,
                                                      {Tz, Ez} = hm_ec_table:submit(
                                                                   {K, {write, {ect, K, J}}}, async,
                                                                   x, {J, []}, Ty),
                                                      {Tz, Ey ++ Ez}
                                              end, {maps:get(N, Tx), []}, lists:seq(I, I + Batch - 1)),
                                   {Tx#{N := T}, S ++ [{N, D, M} || {send, D, M} <- E], I + Batch}
                           end, {Ts, [], I0}, Nodes),
                     Ts2 = Deliver(Sends, Ts1),
                     {Ts3, Acks} = lists:foldl(
                                     fun(N, {Tx, S}) ->
                                             {T, E} = hm_ec_table:tick(Nodes, maps:get(N, Tx)),
                                             {Tx#{N := T}, S ++ [{N, D, M} || {send, D, M} <- E]}
                                     end, {Ts2, []}, Nodes),
                     Deliver(Acks, Ts3)
             end,
    Rounds = ?CORE_N div (Batch * length(Nodes)),
    {Us, _} = timer:tc(fun() ->
                               lists:foldl(fun(R, Ts) -> Round1(R * Batch * length(Nodes), Ts) end,
                                           Ts0, lists:seq(1, Rounds))
                       end),
    Us * 1000 div (Rounds * Batch * length(Nodes)).

per_call(F) ->
    {Us, _} = timer:tc(fun() -> loop(F, ?N) end),
    Us * 1000 div ?N.

loop(_, 0) -> ok;
loop(F, N) -> _ = F(N rem 1000 + 1), loop(F, N - 1).

