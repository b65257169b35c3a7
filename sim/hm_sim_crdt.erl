%% @doc Deterministic simulator of CRDT workloads: N replicas, each holding ONE
%% {@link hm_crdt} of a chosen type and flavor, in ONE Erlang process, over the network,
%% fault model and scheduler of {@link hm_sim} (seeded `rand:*_s' state, simulated
%% milliseconds, no wall clock; this module is its `driver').
%%
%% Papers: the CRDT library, the ChiaVe paper §3–4 (one behaviour, three flavors); pure
%% op-based CRDTs over tagged causal stable broadcast, the Hypermnesia paper §2.8–2.10,
%% §4.3–4.8 (Algorithm 1: {@link hm_tcsb}); see docs/references.md.
%%
%% == Schedules ==
%% A seed (see {@link gen/2}) picks 3–5 replicas, a type among `gcounter', `pncounter',
%% `awset', `rwset', `lwwreg', `mvreg', `ewflag' and a flavor among `op', `state', `delta'
%% (21 combinations), ram or disc storage, network drop / duplicate / delay rates, and a trace:
%% client operations at random replicas (counters: increments, decrements, by 0–3; sets: adds
%% and removes over 3 elements, sometimes add_all/remove_all, so conflicts are frequent;
%% registers: assigns of 3 values, lwwreg with an explicit timestamp from the replica's skewed
%% simulated clock, coarse so that ties happen; ewflag: enable/disable) and the faults of
%% {@link hm_sim:gen_faults/4} (halves / isolated / bridge / flapping partitions, crash and
%% restart). After the work phase: heal, restart every crashed replica, turn random faults
%% off, run until quiescent (or a 60 s cap), check.
%%
%% == Protocols per flavor ==
%% <dl>
%% <dt>`op'</dt><dd>the event of {@link hm_crdt:mutate/3} is the payload of
%% {@link hm_tcsb:broadcast/2}; what {@link hm_tcsb:receive_op/2} delivers (causal order) goes
%% to {@link hm_crdt:deliver/2}; ticks send acks, retransmit ({@link hm_tcsb:resend_due/2};
%% a nodeup resends everything missing), and pass {@link hm_tcsb:stable/1} to
%% {@link hm_crdt:stable/2}, then gc the log. The CRDT's replica id is the broadcast's
%% `{Node, Incarnation}'.</dd>
%% <dt>`state' and `delta'</dt><dd>run by the runtime's pure synchronisation core
%% {@link hm_crdt_sync} (this module only picks the gossip peer and carries its messages):</dd>
%% <dt>`state'</dt><dd>a mutation's event (the whole state) is pushed to every reachable
%% replica; every tick each replica gossips its full state to one random reachable peer, and
%% on a nodeup; receivers {@link hm_crdt:deliver/2} or {@link hm_crdt:merge/2}.</dd>
%% <dt>`delta'</dt><dd>a mutation's delta event is pushed to every reachable replica and
%% kept in a delta buffer; every tick replicas acknowledge (`{ack, Id, Delivered}'), own
%% deltas a peer has not acknowledged are resent as one group, deltas every member has
%% acknowledged are dropped; a peer that lacks something deltas cannot give it (another
%% origin's update, or an own delta already dropped) for 2 ticks in a row, or that comes back
%% (nodeup), gets the full state (merge): the delta-then-full-state fallback.</dd>
%% </dl>
%%
%% == Crashes ==
%% `op' replicas are always disc replicas: the CRDT (as {@link hm_crdt:to_binary/1}), the
%% broadcast's delivered vector and log survive, as hm_log does for tables (a ram op replica
%% would need a state transfer, which the op flavor cannot do: it has no merge). `state' and
%% `delta' replicas are ram or disc per seed: disc keeps the CRDT (and the delta buffer) and
%% the replica id; ram restarts empty as a new incarnation `{Node, Inc + 1}' (so no dot is
%% reused) and catches up by merge. The ACKNOWLEDGED rule is hm_sim's: an operation is
%% acknowledged when applied at its origin, and lost only when a ram crash leaves no replica
%% (up, or crashed with a durable state) that has delivered it.
%%
%% == Checkers ==
%% <ol>
%% <li>convergence: every replica shows the same value and has the same delivered vector;</li>
%% <li>no lost acknowledged op: every acknowledged op is delivered everywhere, and the value
%% equals the type's declarative specification (test/hm_spec_TYPE.erl) over the operations
%% delivered and their happened-before relation (from each operation's vector timestamp).
%% So: for sets an acknowledged add is present unless a remove of the element causally
%% follows it (rwset: or is concurrent with it); lwwreg shows the delivered assign with the
%% greatest `{Ts, Replica}'; mvreg the values of the maximal delivered assigns; counters the
%% exact sum. Counters also get Maelstrom's pn-counter bound: the value lies between the sum
%% of the acknowledged ops and that plus any subset of the lost ones;</li>
%% <li>causal delivery (op): every operation the broadcast delivers is the next of its origin
%% and follows all its timestamp has seen (hm_sim's checker), the CRDT's causal buffer never
%% holds it back (the two layers agree), and its timestamp equals the CRDT's own;</li>
%% <li>stability safety (op): every dot that becomes stable (passed to hm_crdt:stable/2) or
%% is collected from the broadcast log is delivered by every other replica (hm_sim's checker);
%% compaction never changes the value;</li>
%% <li>metadata bound after quiescence (op): hm_crdt:metadata/1 is 0, the broadcast log and
%% both causal buffers are empty; delta: the delta buffers and causal buffers are empty.</li>
%% </ol>
%% Checkers 1, 2 and 5 are the pure {@link check/2} over a summary of the final replicas;
%% 3 and 4 run online. Failures come with the seed and a trace minimised by
%% {@link hm_sim_engine:minimise_with/3}; `make sim SEED=S TRACE=File' replays it.
-module(hm_sim_crdt).

-export([main/1, gen/2, gen_op/2, run/2, run_seed/2, check_seeds/2, check/2, combos/0, replay/3,
         print_failure/2]).
%% driver callbacks of hm_sim
-export([event/2, nodeup/3, action/2, converged/1, quiescent/1]).
-export_type([cfg/0, summary/0]).

-define(TICK, 250).
-define(QUIESCE_CAP, 60000).
-define(ELEMS, [a, b, c]).
-define(VALUES, [x, y, z]).
-define(TYPES, [gcounter, pncounter, awset, rwset, lwwreg, mvreg, ewflag]).

-type cfg() :: #{kind := crdt, n := pos_integer(), type := hm_crdt:type(),
                 flavor := hm_crdt:flavor(), storage := ram | disc, drop := float(),
                 dup := float(), delay := pos_integer(), duration := pos_integer(),
                 seed := integer(), skew := #{node() => integer()}, crash => boolean()}.
%% What checkers 1, 2 and 5 look at: per node (in node order) its value, delivered vector and
%% leftover metadata; every client operation by dot.
-type summary() :: #{values := [{node(), term()}], delivered := [{node(), hm_vv:vv()}],
                     leftovers := [{node(), #{atom() => non_neg_integer()}}],
                     ops := #{hm_vv:dot() => map()}}.

%%% ================================================================ schedules

%% @doc Every type x flavor the workloads cover.
-spec combos() -> [{hm_crdt:type(), hm_crdt:flavor()}].
combos() -> [{T, F} || T <- ?TYPES, F <- hm_crdt:flavors()].

%% @doc The configuration and trace of CRDT seed `Seed'. Options override configuration
%% fields (`n', `type', `flavor', `storage', `drop', `dup', `delay', `duration', `ops',
%% `faults', `crash'). An op-flavor configuration always has disc storage.
-spec gen(integer(), map()) -> {cfg(), [hm_sim:action()]}.
gen(Seed, Opts) ->
    R0 = rand:seed_s(exsss, {Seed, 16#c4d7, 16#51e}),
    {[N, CI, SI, Drop, Dup, Delay, NOps, NFaults], R1} =
        hm_sim:draws([{int, 3, 5}, {int, 1, length(combos())}, {int, 1, 2}, {int, 0, 15},
                      {int, 0, 10}, {int, 1, 150}, {int, 15, 60}, {int, 0, 4}], R0),
    {Type, Flavor} = lists:nth(CI, combos()),
    Cfg0 = #{kind => crdt, n => N, type => Type, flavor => Flavor,
             storage => element(SI, {ram, disc}), drop => Drop / 100, dup => Dup / 100,
             delay => Delay, duration => 4000, seed => Seed, ops => NOps, faults => NFaults},
    Cfg1 = maps:merge(Cfg0, Opts),
    #{n := N1, duration := Dur, ops := Ops, faults := Fs, type := T1} = Cfg1,
    Nodes = hm_sim:nodes_of(N1),
    {Skews, R2} = lists:foldl(fun(Nd, {M, R}) ->
                                      {X, R_} = rand:uniform_s(401, R),
                                      {M#{Nd => X - 201}, R_}
                              end, {#{}, R1}, Nodes),
    Cfg2 = maps:without([ops, faults], Cfg1#{skew => Skews}),
    Cfg = case Cfg2 of
              #{flavor := op} -> Cfg2#{storage := disc};
              _ -> Cfg2
          end,
    {OpActs, R3} = gen_ops(Ops, T1, Nodes, Dur, R2),
    {FaultActs0, _} = hm_sim:gen_faults(Fs, Nodes, Dur, R3),
    FaultActs = case maps:get(crash, Cfg, true) of
                    true -> FaultActs0;
                    false -> [A || A = {_, F} <- FaultActs0, element(1, F) =/= crash,
                                   element(1, F) =/= restart]
                end,
    {Cfg, lists:keysort(1, OpActs ++ FaultActs)}.

gen_ops(0, _, _, _, R) -> {[], R};
gen_ops(K, Type, Nodes, Dur, R) ->
    {T, R1} = rand:uniform_s(Dur, R),
    {Nd, R2} = hm_sim:pick(Nodes, R1),
    {Op, R3} = gen_op(Type, R2),
    {Rest, R4} = gen_ops(K - 1, Type, Nodes, Dur, R3),
    {[{T, {op, Nd, Op}} | Rest], R4}.

%% @doc A random client operation of a type (the CRDT-table family draws them too).
-spec gen_op(hm_crdt:type(), rand:state()) -> {term(), rand:state()}.
gen_op(gcounter, R) ->
    hm_sim:pick([increment, increment, {increment, 0}, {increment, 2}, {increment, 3}], R);
gen_op(pncounter, R) ->
    hm_sim:pick([increment, decrement, {increment, 0}, {increment, 2}, {decrement, 3}], R);
gen_op(Set, R) when Set =:= awset; Set =:= rwset ->
    {E, R1} = hm_sim:pick(?ELEMS, R),
    {X, R2} = rand:uniform_s(10, R1),
    {if X =< 5 -> {add, E};
        X =< 8 -> {remove, E};
        X =:= 9 -> {add_all, ?ELEMS -- [E]};
        true -> {remove_all, ?ELEMS -- [E]}
     end, R2};
gen_op(Reg, R) when Reg =:= lwwreg; Reg =:= mvreg ->
    {V, R1} = hm_sim:pick(?VALUES, R),
    {{assign, V}, R1};
gen_op(ewflag, R) ->
    hm_sim:pick([enable, disable], R).

%%% ================================================================ running

%% @doc Generate and run CRDT seed `Seed'.
-spec run_seed(integer(), map()) -> hm_sim:result().
run_seed(Seed, Opts) ->
    {Cfg, Trace} = gen(Seed, Opts),
    run(Cfg, Trace).

%% @doc Run a configuration and trace to quiescence, then check.
-spec run(cfg(), [hm_sim:action()]) -> hm_sim:result().
run(Cfg = #{n := N, seed := Seed}, Trace) ->
    Nodes = hm_sim:nodes_of(N),
    S0 = #{driver => ?MODULE, now => 0, seq => 0, q => gb_trees:empty(), cfg => Cfg,
           nodes => Nodes, rand => rand:seed_s(exsss, {Seed, 16#c7, 16#ab}), reps => #{},
           inc => #{}, groups => all, epochs => #{}, applied => #{}, ops => #{},
           failures => [], faults => true, stats => #{}},
    S1 = lists:foldl(fun(Nd, Acc) ->
                             Acc#{reps := (maps:get(reps, Acc))#{Nd => new_rep(Nd, 1, Acc)},
                                  inc := (maps:get(inc, Acc))#{Nd => 1},
                                  applied := (maps:get(applied, Acc))#{Nd => #{}}}
                     end, S0, Nodes),
    hm_sim_engine:drive(S1, Trace, fun finish/1).

new_rep(Nd, Inc, #{cfg := #{type := T, flavor := F}, nodes := Nodes}) ->
    Id = {Nd, Inc},
    R = #{node => Nd, id => Id, status => ready, crdt => hm_crdt:new(T, F)},
    case F of
        op -> R#{tcsb => hm_tcsb:new(Id, Nodes), stable => #{}};
        _ -> R#{sync => hm_crdt_sync:new(F, Id)}
    end.

rep(Nd, #{reps := Reps}) -> maps:get(Nd, Reps).
put_rep(Nd, R, S = #{reps := Reps}) -> S#{reps := Reps#{Nd => R}}.
flavor(#{cfg := #{flavor := F}}) -> F.

%% @doc The driver's events (called by hm_sim's scheduler): ticks, deliveries, trace actions.
-spec event(term(), map()) -> map().
event({tick, Nd}, S) ->
    S1 = hm_sim_engine:schedule(?TICK, {tick, Nd}, S),
    case hm_sim_engine:up(Nd, S1) of
        false -> S1;
        true -> tick(Nd, rep(Nd, S1), S1)
    end;
event({deliver, From, To, Msg, Epoch}, S) ->
    case hm_sim_engine:deliverable(From, To, Epoch, S) of
        false -> hm_sim_engine:bump(dropped_cut, S);
        true -> handle(From, To, Msg, S)
    end;
event({action, A}, S) ->
    action(A, hm_sim_engine:bump(actions, S)).

%% @doc `Peer' became reachable from `At' (a heal, or a restart of either).
-spec nodeup(node(), node(), map()) -> map().
nodeup(At, Peer, S) ->
    case hm_sim_engine:up(At, S) of
        false -> S;
        true ->
            R = rep(At, S),
            case flavor(S) of
                op ->
                    %% retransmission resumes from the peer's next acknowledgement
                    B = hm_tcsb:forget_member(Peer, maps:get(tcsb, R)),
                    put_rep(At, R#{tcsb := B}, S);
                _ ->
                    {Y, Out} = hm_crdt_sync:nodeup(Peer, maps:get(crdt, R), maps:get(sync, R)),
                    send_sync(At, Out, put_rep(At, R#{sync := Y}, S))
            end
    end.

%% a lattice replica's messages, full states counted
send_sync(From, Out, S) ->
    Fulls = length([x || {_, {full, _}} <- Out]),
    hm_sim_engine:send_all(From, Out, hm_sim_engine:bump(full_states, Fulls, S)).

%%% ------------------------------------------------------------ client operations

%% @doc A trace action: a client operation, a partition, a heal, a crash, a restart.
-spec action(term(), map()) -> map().
action({op, Nd, Op0}, S = #{cfg := #{type := Type}}) ->
    case hm_sim_engine:up(Nd, S) of
        false -> hm_sim_engine:bump(ops_skipped, S);
        true ->
            R = #{crdt := C, id := Id} = rep(Nd, S),
            Op = case {Type, Op0} of
                     {lwwreg, {assign, V}} -> {assign, V, lww_clock(Nd, S)};
                     _ -> Op0
                 end,
            {ok, C1, Ev} = hm_crdt:mutate(Op, Id, C),
            Ts = hm_crdt:delivered(C1),
            Dot = {Id, hm_vv:get(Id, Ts)},
            Info = #{dot => Dot, ts => Ts, op => Op, origin => Id, lost => false},
            S1 = hm_sim_engine:bump(ops, S#{ops := (maps:get(ops, S))#{Dot => Info}}),
            submit(Nd, R#{crdt := C1}, Ev, S1)
    end;
action({partition, Shape, Groups}, S) ->
    hm_sim_engine:bump({partition, Shape}, hm_sim_engine:reconnect(S#{groups := Groups}, S));
action(heal, S) ->
    hm_sim_engine:reconnect(S#{groups := all}, S);
action({crash, Nd}, S = #{reps := Reps, nodes := Nodes, cfg := Cfg}) ->
    case hm_sim_engine:up(Nd, S) of
        false -> S;
        true ->
            R = rep(Nd, S),
            D = case {maps:get(flavor, Cfg), maps:get(storage, Cfg)} of
                    {op, _} -> durable(R);
                    {_, disc} -> durable(R);
                    {_, ram} -> none
                end,
            S1 = case D of
                     none -> mark_lost(Nd, S);
                     _ -> S
                 end,
            S2 = lists:foldl(fun(M, Acc) -> hm_sim_engine:new_epoch(Nd, M, Acc) end, S1,
                             Nodes -- [Nd]),
            hm_sim_engine:bump(crashes, S2#{reps := Reps#{Nd => {down, D, D =/= none}}})
    end;
action({restart, Nd}, S = #{reps := Reps, inc := Incs}) ->
    case maps:get(Nd, Reps) of
        {down, D, _} ->
            {Inc, R} = case D of
                           none -> I = maps:get(Nd, Incs) + 1, {I, new_rep(Nd, I, S)};
                           _ -> {maps:get(Nd, Incs), restore(Nd, D, S)}
                       end,
            S1 = hm_sim_engine:bump(restarts, S#{reps := Reps#{Nd => R}, inc := Incs#{Nd => Inc}}),
            lists:foldl(fun(M, Acc) -> nodeup(M, Nd, nodeup(Nd, M, Acc)) end, S1,
                        hm_sim_engine:reachable(Nd, S1));
        _ -> S
    end.

%% lwwreg's explicit timestamp: the replica's skewed simulated clock, coarse (20 ms) so that
%% concurrent assigns tie and the replica id decides
lww_clock(Nd, #{now := Now, cfg := #{skew := Skew}}) ->
    max(0, (Now + maps:get(Nd, Skew)) div 20).

submit(Nd, R = #{crdt := C}, Ev, S) ->
    case flavor(S) of
        op ->
            {hm_event, op, _, {_, TsC, _}} = Ev,
            {Msg = {_, TsB, _}, Out, B1} = hm_tcsb:broadcast(Ev, maps:get(tcsb, R)),
            S1 = case TsB =:= TsC of
                     true -> S;
                     false -> hm_sim_engine:fail({causal_timestamps_differ, Nd, TsB, TsC}, S)
                 end,
            S2 = hm_sim_engine:events(Nd, [{applied, Msg}], put_rep(Nd, R#{tcsb := B1}, S1)),
            hm_sim_engine:send_all(Nd, Out, check_layers(Nd, C, B1, S2));
        _ ->
            {Y, Out} = hm_crdt_sync:local(Ev, C, hm_sim_engine:reachable(Nd, S), maps:get(sync, R)),
            hm_sim_engine:send_all(Nd, Out, put_rep(Nd, R#{sync := Y}, S))
    end.

%% the CRDT's own causal delivery must agree with the broadcast's (checker 3)
check_layers(Nd, C, B, S) ->
    case {hm_crdt:pending(C), hm_crdt:delivered(C) =:= hm_tcsb:delivered(B)} of
        {0, true} -> S;
        {P, _} -> hm_sim_engine:fail({crdt_layer_disagrees, Nd, {crdt_pending, P},
                               {crdt, hm_crdt:delivered(C)}, {tcsb, hm_tcsb:delivered(B)}}, S)
    end.

%%% ------------------------------------------------------------ messages

handle(_From, To, {op, Msg}, S) ->
    R = #{tcsb := B, crdt := C} = rep(To, S),
    {Ready, B1} = hm_tcsb:receive_op(Msg, B),
    {C1, S1} = lists:foldl(fun({_, _, Ev}, {Cx, Sx}) -> deliver(To, Ev, Cx, Sx) end,
                           {C, S}, Ready),
    S2 = hm_sim_engine:events(To, [{applied, M} || M <- Ready],
                              put_rep(To, R#{tcsb := B1, crdt := C1}, S1)),
    check_layers(To, C1, B1, S2);
handle(_From, To, {ack, Id, V, Newest}, S) ->
    R = rep(To, S),
    put_rep(To, R#{tcsb := hm_tcsb:receive_ack(Id, V, Newest, maps:get(tcsb, R))}, S);
handle(_From, To, Msg, S) ->
    %% a lattice replica's message: hm_crdt_sync applies it
    R = #{crdt := C, sync := Y} = rep(To, S),
    {C1, Y1, Errs} = hm_crdt_sync:handle(Msg, C, Y),
    S1 = lists:foldl(fun({Kind, E}, Acc) -> hm_sim_engine:fail({crdt_error, To, Kind, E}, Acc) end,
                     S, Errs),
    put_rep(To, R#{crdt := C1, sync := Y1}, S1).

deliver(Nd, Ev, C, S) ->
    case hm_crdt:deliver(Ev, C) of
        {error, E} -> {C, hm_sim_engine:fail({crdt_error, Nd, deliver, E}, S)};
        C1 -> {C1, S}
    end.

%%% ------------------------------------------------------------ ticks

tick(Nd, R, S) ->
    Up = hm_sim_engine:reachable(Nd, S),
    case flavor(S) of
        op -> tick_op(Nd, Up, R, S);
        F ->
            {Gossip, S1} = case {F, Up} of
                               {state, [_ | _]} ->
                                   {I, Sx} = hm_sim_engine:uniform(length(Up), S),
                                   {lists:nth(I, Up), Sx};
                               _ -> {none, S}
                           end,
            #{crdt := C, sync := Y} = R,
            {Y1, Out, _} = hm_crdt_sync:tick(Nd, Up, maps:get(nodes, S1), Gossip, {C, Y}),
            send_sync(Nd, Out, put_rep(Nd, R#{sync := Y1}, S1))
    end.

%% hm_ec_table:tick/2 for a CRDT: acks, retransmission, stability, log gc
tick_op(Nd, Up, R = #{tcsb := B0, crdt := C, stable := Prev}, S) ->
    {Resends, B} = lists:foldl(fun(M, {Acc, Bx}) ->
                                       {Msgs, By} = hm_tcsb:resend_due(M, Bx),
                                       {Acc ++ [{M, {op, Msg}} || Msg <- Msgs], By}
                               end, {[], B0}, Up),
    Out = [A || A = {M, _} <- hm_tcsb:acks(B0), lists:member(M, Up)] ++ Resends,
    V = hm_tcsb:stable(B),
    Cap = hm_vv:meet(V, hm_crdt:delivered(C)),
    NewlyStable = [{O, Seq} || {O, N} <- maps:to_list(Cap),
                               Seq <- lists:seq(hm_vv:get(O, Prev) + 1, N)],
    C1 = hm_crdt:stable(V, C),
    S1 = case hm_crdt:value(C1) =:= hm_crdt:value(C) of
             true -> S;
             false -> hm_sim_engine:fail({stable_changed_value, Nd, hm_crdt:value(C),
                                   hm_crdt:value(C1)}, S)
         end,
    {Gone, B1} = hm_tcsb:gc_dots(B),
    R1 = R#{tcsb := hm_tcsb:tick(B1), crdt := C1, stable := hm_vv:join(Prev, Cap)},
    S2 = case lists:usort(NewlyStable ++ Gone) of
             [] -> S1;
             Dots -> hm_sim_engine:events(Nd, [{stabilized, Dots}], S1)
         end,
    hm_sim_engine:send_all(Nd, Out, put_rep(Nd, R1, S2)).

%%% ------------------------------------------------------------ crashes

durable(#{crdt := C} = R) ->
    Extra = case R of
                #{tcsb := B, stable := Prev} ->
                    {hm_tcsb:self(B), hm_tcsb:delivered(B), hm_tcsb:log_msgs(B), Prev};
                #{sync := Y} -> hm_crdt_sync:deltas(Y);
                _ -> none
            end,
    {disc, hm_crdt:to_binary(C), Extra}.

restore(Nd, {disc, Bin, Extra}, S = #{nodes := Nodes}) ->
    {ok, C} = hm_crdt:from_binary(Bin),
    R = #{node => Nd, id => {Nd, maps:get(Nd, maps:get(inc, S))}, status => ready, crdt => C},
    case flavor(S) of
        op ->
            {Self, Delivered, Log, Prev} = Extra,
            R#{tcsb => hm_tcsb:restore_log(Log, hm_tcsb:new(Self, Nodes, Delivered)),
               stable => Prev};
        F -> R#{sync => hm_crdt_sync:restore(F, maps:get(id, R), Extra)}
    end.

%% A ram crash of `Nd': every operation no other replica holds (up, or crashed with a
%% durable state) is lost, which the async write contract permits.
mark_lost(Nd, S = #{ops := Ops, nodes := Nodes, reps := Reps}) ->
    Vectors = [case maps:get(M, Reps) of
                   #{crdt := C} -> hm_crdt:delivered(C);
                   {down, {disc, Bin, _}, _} ->
                       {ok, C} = hm_crdt:from_binary(Bin),
                       hm_crdt:delivered(C);
                   {down, none, _} -> #{}
               end || M <- Nodes, M =/= Nd],
    Ops1 = maps:map(fun(Dot, I = #{lost := false}) ->
                            I#{lost := not lists:any(fun(V) -> hm_vv:contains(Dot, V) end,
                                                     Vectors)};
                       (_, I) -> I
                    end, Ops),
    S#{ops := Ops1}.

%%% ================================================================ quiescence and checks

%% @doc Every replica is up and shows the same value and delivered vector.
-spec converged(map()) -> boolean().
converged(S) ->
    Rs = hm_sim_engine:reps(S),
    lists:all(fun is_map/1, Rs) andalso
        hm_check:converged([hm_crdt:value(C) || #{crdt := C} <- Rs]) andalso
        hm_check:converged([hm_crdt:delivered(C) || #{crdt := C} <- Rs]).

%% @doc Converged, and no metadata left that checker 5 looks at.
-spec quiescent(map()) -> boolean().
quiescent(S) ->
    converged(S) andalso lists:all(fun(R) -> lists:all(fun({_, N}) -> N =:= 0 end,
                                                        maps:to_list(leftovers(R)))
                                   end, hm_sim_engine:reps(S)).

%% metadata that must be gone after quiescence (checker 5)
leftovers(#{crdt := C, tcsb := B}) ->
    #{crdt_metadata => hm_crdt:metadata(C), crdt_pending => hm_crdt:pending(C),
      log => hm_tcsb:log_size(B), pending => hm_tcsb:pending(B)};
leftovers(#{crdt := C, sync := Y}) ->
    hm_crdt_sync:leftovers(C, Y).

finish(S = #{cfg := Cfg, nodes := Nodes, ops := Ops, stats := St, failures := Fs0}) ->
    Rs = hm_sim_engine:reps(S),
    Summary = #{values => [{Nd, hm_crdt:value(C)} || {Nd, #{crdt := C}} <- lists:zip(Nodes, Rs)],
                delivered => [{Nd, hm_crdt:delivered(C)}
                              || {Nd, #{crdt := C}} <- lists:zip(Nodes, Rs)],
                leftovers => [{Nd, leftovers(R)} || {Nd, R} <- lists:zip(Nodes, Rs)],
                ops => Ops},
    Fs = Fs0 ++ [{maps:get(now, S), F} || F <- check(Cfg, Summary)],
    Lost = length([x || #{lost := true} <- maps:values(Ops)]),
    #{ok => Fs =:= [], failures => Fs,
      stats => St#{quiesced_ms => maps:get(quiesced_ms, S), lost_with_ram_crash => Lost,
                   value => element(2, hd(maps:get(values, Summary))),
                   max_metadata => lists:max([0 | [hm_crdt:metadata(C) || #{crdt := C} <- Rs]])}}.

%% @doc Checkers 1 (convergence), 2 (no lost acknowledged op; the value is the spec's) and 5
%% (metadata bound: for `op' and `delta' the leftovers are 0) over a summary of the replicas
%% after quiescence. Returns the failures found (`[]': all pass).
-spec check(#{type := hm_crdt:type(), flavor := hm_crdt:flavor(), _ => _}, summary()) ->
          [term()].
check(#{type := Type, flavor := Flavor},
      #{values := Values, delivered := Delivered, leftovers := Left, ops := Ops}) ->
    %% 1. convergence
    C1 = case {lists:usort([V || {_, V} <- Values]), lists:usort([D || {_, D} <- Delivered])} of
             {[_], [_]} -> [];
             {Vs, Ds} -> [{diverged, Values, {distinct_values, length(Vs)},
                           {distinct_delivered, length(Ds)}}]
         end,
    %% 2. every acknowledged op delivered everywhere; each value is the spec's
    {_, Final} = hd(Delivered),
    Acked = [I || I = #{lost := false} <- maps:values(Ops)],
    C2a = [{acknowledged_op_lost, Nd, maps:without([ts], I)}
           || {Nd, D} <- Delivered, I = #{dot := Dot} <- Acked, not hm_vv:contains(Dot, D)],
    In = [I || I = #{dot := Dot} <- maps:values(Ops), hm_vv:contains(Dot, Final)],
    History = [{Dot, O, Op, sets:from_list([D || #{dot := D} <- In, D =/= Dot,
                                                 hm_vv:contains(D, Ts)])}
               || #{dot := Dot, origin := O, op := Op, ts := Ts} <- In],
    Expected = (hm_spec:spec_module(Type)):spec(History),
    C2b = [{value_not_spec, Nd, {shown, V}, {expected, Expected}}
           || {Nd, V} <- Values, V =/= Expected],
    C2c = case lists:member(Type, [gcounter, pncounter]) of
              true -> counter_bounds(Type, Values, Ops);
              false -> []
          end,
    %% 5. metadata bound after quiescence
    C5 = case Flavor of
             state -> [];
             _ -> [{metadata_left, Nd, L} || {Nd, L} <- Left,
                                             lists:any(fun(N) -> N =/= 0 end, maps:values(L))]
         end,
    C1 ++ C2a ++ C2b ++ C2c ++ C5.

%% Maelstrom's pn-counter check: acknowledged sum plus some subset of the lost ops
counter_bounds(Type, Values, Ops) ->
    Amount = fun(Op) -> (hm_spec:spec_module(Type)):spec([{1, r, Op, sets:new()}]) end,
    Acked = lists:sum([Amount(Op) || #{lost := false, op := Op} <- maps:values(Ops)]),
    LostAmounts = [Amount(Op) || #{lost := true, op := Op} <- maps:values(Ops)],
    Lo = Acked + lists:sum([A || A <- LostAmounts, A < 0]),
    Hi = Acked + lists:sum([A || A <- LostAmounts, A > 0]),
    [{counter_out_of_bounds, Nd, V, {Lo, Hi}} || {Nd, V} <- Values, V < Lo orelse V > Hi].

%%% ================================================================ seeds and CLI

%% @doc Run CRDT seeds `From' .. `From + Count - 1'; returns
%% `{Passed, Failed, Totals, FailedSeeds}' as {@link hm_sim:check_seeds/2}.
-spec check_seeds({integer(), pos_integer()}, map()) ->
          {non_neg_integer(), non_neg_integer(), map(), [{integer(), hm_sim:result()}]}.
check_seeds({From, Count}, Opts) ->
    lists:foldl(fun(Seed, {P, F, Tot, Bad}) ->
                        Res = #{ok := Ok, stats := St} = run_seed(Seed, Opts),
                        Tot1 = hm_sim_engine:totals(maps:without([max_metadata, value], St), Tot),
                        case Ok of
                            true -> {P + 1, F, Tot1, Bad};
                            false -> {P, F + 1, Tot1, Bad ++ [{Seed, Res}]}
                        end
                end, {0, 0, #{}, []}, lists:seq(From, From + Count - 1)).

%% @doc Command line (normally through {@link hm_sim:main/1}): `["seeds", N]' runs CRDT
%% seeds 1..N; `["seed", S]' replays one. Halts with status 1 when a schedule failed.
-spec main([string()]) -> no_return().
main(["seeds", N]) ->
    {P, F, Tot, Bad} = check_seeds({1, list_to_integer(N)}, #{}),
    [print_failure(Seed, Res) || {Seed, Res} <- Bad],
    io:format("~p CRDT schedules, ~p client ops, ~p messages, ~p full states; "
              "faults injected: ~s~n",
              [P + F, maps:get(ops, Tot, 0), maps:get(msgs, Tot, 0),
               maps:get(full_states, Tot, 0), hm_sim_engine:fault_line(Tot)]),
    io:format("sim crdt: ~p passed, ~p failed~n", [P, F]),
    halt(case F of 0 -> 0; _ -> 1 end);
main(["seed", S]) ->
    Seed = list_to_integer(S),
    {Cfg, Trace} = gen(Seed, #{}),
    halt(case replay(Seed, Cfg, Trace) of true -> 0; false -> 1 end).

%% @doc Run one configuration and trace, print it and its result; true when it passed.
-spec replay(integer(), cfg(), [hm_sim:action()]) -> boolean().
replay(Seed, Cfg, Trace) ->
    Res = #{ok := Ok} = run(Cfg, Trace),
    io:format("crdt seed ~p: ~p~ntrace (~p actions): ~p~n", [Seed, Cfg, length(Trace), Trace]),
    case Ok of
        true -> io:format("stats: ~p~nsim crdt: 1 passed, 0 failed~n", [maps:get(stats, Res)]);
        false -> print_failure(Seed, Res), io:format("sim crdt: 0 passed, 1 failed~n")
    end,
    Ok.

%% @doc Print a failed CRDT seed: its failures, and a minimised trace written to
%% `_build/sim/crdt-trace-S.eterm' (replay: `make sim SEED=S TRACE=File').
-spec print_failure(integer(), hm_sim:result()) -> ok.
print_failure(Seed, #{failures := Fs}) ->
    {Cfg, Trace} = gen(Seed, #{}),
    Desc = io_lib:format("~p, ~p, ~p, ~p replicas", [maps:get(type, Cfg), maps:get(flavor, Cfg),
                                                     maps:get(storage, Cfg), maps:get(n, Cfg)]),
    hm_sim_engine:print_minimised("crdt seed", Seed, Desc, fun(T) -> run(Cfg, T) end, Trace,
                                  Fs, "_build/sim/crdt-trace-" ++ integer_to_list(Seed) ++ ".eterm",
                                  fun(Min) -> {crdt, Cfg, Min} end).
