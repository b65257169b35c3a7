%% @doc Deterministic simulator of one replica group under DottedDB replication (the DottedDB
%% paper, *DottedDB: Anti-Entropy without Merkle Trees, Deletes without Tombstones*, §IV):
%% N copies, each the runtime's own pure core {@link hm_dotted} (node-clock or Merkle
%% anti-entropy), over the scheduler, network and faults of {@link hm_sim} (this module is
%% its `driver': seeded `rand:*_s' state, simulated milliseconds, no wall clock). The
%% simulator has no replication logic of its own: it carries out the core's effects
%% (`send' through the faulty network, `timer' as scheduled events) and looks at its state.
%%
%% == Schedules ==
%% A seed (see {@link gen/2}) picks 3 to 5 copies, node-clock (3 in 4) or Merkle anti-entropy,
%% drop, duplicate and delay rates, and a trace: client puts (a fresh value each) and deletes
%% over 4 keys at random copies, each with the context of a get at that copy (read, modify,
%% write); partitions (halves, isolated, bridge, flapping) and crashes with restarts from the
%% copy's saved state (a DottedDB node restarts with stable storage) from
%% {@link hm_sim:gen_faults/4} (option `restart => empty': a crashed copy restarts, as a new
%% incarnation `{Node, Inc}' of its node's copy, with
%% nothing, as the runtime's copies do, and takes a handoff); and churn: 0 to 3 copies replaced for good by a new node id,
%% which starts empty and takes a handoff. Strip and anti-entropy timers run every 250 ms.
%% After the work phase: heal, restart every crashed copy, turn random faults off, run until
%% quiescent (or 60 simulated s), check.
%%
%% == Checkers ==
%% <ol>
%% <li>convergence: every copy is ready and shows the same values for every key;</li>
%% <li>no lost acknowledged write: a write is acknowledged when its copy applied it (a put
%% returns then); it is lost only when its copy is replaced (or restarts without its state)
%% while no other copy has its dot (the node failed for good before replicating it). Every
%% key shows the values of the acknowledged puts that no surviving write's context names;
%% a lost write's effect may have reached other copies without its dot (the filled context
%% of a repair), so the values it superseded may be gone as well, and nothing else;</li>
%% <li>bounded clocks under churn: at quiescence no stored object keeps a context, so its
%% clock has only the ids of its live versions' dots (at most one per sibling), whatever the
%% number of ids ever used; the largest clock seen at any store is reported;</li>
%% <li>no tombstone after strip: at quiescence only keys with a value are stored, and the
%% non-stripped keys and (node-clock mode) the dot-key maps are empty;</li>
%% <li>no message dropped as malformed.</li>
%% </ol>
-module(hm_sim_dotted).

-export([gen/2, run/2, run_seed/2, check_seeds/2, print_failure/2, summary_line/3, replay/3]).
%% driver callbacks of hm_sim
-export([event/2, nodeup/3, action/2, converged/1, quiescent/1]).
-export_type([cfg/0]).

-define(KEYS, [k1, k2, k3, k4]).
-define(INTERVAL, 250).

-type cfg() :: #{kind := dotted, n := pos_integer(), ae := node_clock | merkle,
                 drop := float(), dup := float(), delay := pos_integer(),
                 duration := pos_integer(), seed := integer(), skew := map(),
                 measure => boolean(), strip_interval => pos_integer(),
                 drop_replicate => float(), merkle => hm_merkle:shape(),
                 sync_interval => pos_integer(), keys => [term()],
                 start => ready | created}.

%%% ================================================================ schedules

%% @doc The configuration and trace of dotted seed `Seed'. Options override configuration
%% fields (`n', `ae', `drop', `dup', `delay', `duration', `ops', `faults', `churn', `restart',
%% and `start': `ready', every copy starting ready, or `created', the first one ready and
%% each other one taking a handoff first, as the copies of a table just created start).
-spec gen(integer(), map()) -> {cfg(), [hm_sim:action()]}.
gen(Seed, Opts) ->
    R0 = rand:seed_s(exsss, {Seed, 16#d077, 16#ed}),
    {[N, AEI, Drop, Dup, Delay, NOps, NFaults, NChurn], R1} =
        hm_sim:draws([{int, 3, 5}, {int, 1, 4}, {int, 0, 20}, {int, 0, 10}, {int, 1, 150},
                      {int, 15, 60}, {int, 0, 4}, {int, 0, 3}], R0),
    Cfg0 = #{kind => dotted, n => N, ae => case AEI of 4 -> merkle; _ -> node_clock end,
             drop => Drop / 100, dup => Dup / 100, delay => Delay, duration => 4000,
             seed => Seed, ops => NOps, faults => NFaults, churn => NChurn, skew => #{},
             restart => saved},
    Cfg1 = maps:merge(Cfg0, Opts),
    #{n := N1, duration := Dur, ops := Ops, faults := Fs, churn := Ch} = Cfg1,
    Nodes = hm_sim:nodes_of(N1),
    Keys = maps:get(keys, Cfg1, ?KEYS),
    {OpActs, R2} = gen_ops(Ops, Nodes, Dur, Keys, R1),
    {FaultActs, R3} = hm_sim:gen_faults(Fs, Nodes, Dur, R2),
    {ChurnActs, _} = lists:foldl(fun(_, {Acc, R}) ->
                                         {[T, I], Ra} = hm_sim:draws([{int, 1, Dur},
                                                                      {int, 1, N1}], R),
                                         {Acc ++ [{T, {replace, I}}], Ra}
                                 end, {[], R3}, lists:seq(1, Ch)),
    {maps:without([ops, faults, churn], Cfg1),
     lists:keysort(1, OpActs ++ FaultActs ++ ChurnActs)}.

gen_ops(0, _, _, _, R) -> {[], R};
gen_ops(K, Nodes, Dur, Keys, R) ->
    {T, R1} = rand:uniform_s(Dur, R),
    {Nd, R2} = hm_sim:pick(Nodes, R1),
    {Key, R3} = hm_sim:pick(Keys, R2),
    {X, R4} = rand:uniform_s(3, R3),
    Op = case X of 3 -> delete; _ -> put end,
    {Rest, R5} = gen_ops(K - 1, Nodes, Dur, Keys, R4),
    {[{T, {op, Nd, Key, Op}} | Rest], R5}.

%%% ================================================================ running

%% @doc Generate and run dotted seed `Seed'.
-spec run_seed(integer(), map()) -> hm_sim:result().
run_seed(Seed, Opts) ->
    {Cfg, Trace} = gen(Seed, Opts),
    run(Cfg, Trace).

%% @doc Run a configuration and trace to quiescence, then check. Besides the generated
%% actions a trace may hold `{op_i, I, Key, put | delete}' (the I-th copy of the group as it
%% is then). With `measure => true' the
%% result's stats also hold `samples': every store event as
%% `{Time, Copy, Key, Info}' and every write as `{write, Time, Copy, Key, Dot, put | delete}'.
-spec run(cfg(), [hm_sim:action()]) -> hm_sim:result().
run(Cfg = #{n := N, seed := Seed, duration := Dur}, Trace) ->
    Nodes = hm_sim:nodes_of(N),
    S0 = #{driver => ?MODULE, now => 0, seq => 0, q => gb_trees:empty(), cfg => Cfg,
           nodes => Nodes, rand => rand:seed_s(exsss, {Seed, 16#d0, 16#77}), reps => #{},
           inc => #{}, groups => all, epochs => #{}, applied => #{}, ops => #{},
           failures => [], faults => true, stats => #{}, samples => [], next_id => N + 1,
           max_entries => 0},
    try
        %% `start => created': as create_table starts a group's copies, one after another,
        %% each later one finding a ready copy and so taking a handoff first
        Boot = case maps:get(start, Cfg, ready) of
                   ready -> fun(_) -> false end;
                   created -> fun(Nd) -> Nd =/= hd(Nodes) end
               end,
        S1 = lists:foldl(fun(Nd, Acc) -> start_copy(Nd, Nodes, Boot(Nd), Acc) end, S0, Nodes),
        S2 = lists:foldl(fun({T, A}, Acc) -> hm_sim_engine:schedule_at(T, {action, A}, Acc) end,
                         S1, [{T, A} || {T, A} <- Trace, T < Dur]),
        S3 = hm_sim_engine:run_until(Dur, S2),
        S4 = hm_sim_engine:final_heal(S3),
        S5 = hm_sim_engine:quiesce(Dur, S4),
        finish(S5)
    catch Class:Reason:Stack ->
            #{ok => false, failures => [{exception, Class, Reason, lists:sublist(Stack, 6)}],
              stats => #{}}
    end.

start_copy(Nd, Peers, Bootstrap, S = #{cfg := Cfg, inc := Inc}) ->
    %% a copy started again after a crash keeps the incarnation the crash gave it (the timers
    %% of its previous life are stale); a copy started without state is a new incarnation of
    %% its node, `{Node, Inc}', as the runtime's are; the group is given as addresses
    O = #{id => {Nd, maps:get(Nd, Inc, 1)}, peers => Peers, anti_entropy => maps:get(ae, Cfg),
          strip_interval => maps:get(strip_interval, Cfg, ?INTERVAL),
          sync_interval => maps:get(sync_interval, Cfg, ?INTERVAL),
          seed => maps:get(seed, Cfg), bootstrap => Bootstrap, events => true,
          merkle => maps:get(merkle, Cfg, #{fanout => 4, depth => 2})},
    {R, Effs} = hm_dotted:new(O),
    %% timers start at a random offset, as the copies of a real group do
    {Off, S1} = hm_sim_engine:uniform(?INTERVAL, S#{inc := Inc#{Nd => maps:get(Nd, Inc, 1)}}),
    effects(Nd, [case E of {timer, Ms, M} -> {timer, Ms + Off, M}; _ -> E end || E <- Effs],
            put_rep(Nd, R, S1)).

rep(Nd, #{reps := Reps}) -> maps:get(Nd, Reps).
put_rep(Nd, R, S = #{reps := Reps}) -> S#{reps := Reps#{Nd => R}}.

%% Carry out a copy's effects: sends through the network, timers as events, store events to
%% the checkers and samples; drops of malformed messages are failures.
effects(Nd, Effs, S = #{inc := Inc}) ->
    S1 = lists:foldl(
           fun({timer, Ms, M}, Acc) ->
                   hm_sim_engine:schedule(Ms, {timer, Nd, maps:get(Nd, Inc), M}, Acc);
              ({event, {store, Key, Info}}, Acc) -> stored(Nd, Key, Info, Acc);
              ({drop, {not_a_peer, _, _}}, Acc) -> hm_sim_engine:bump(dropped_not_a_peer, Acc);
              ({drop, D}, Acc) -> hm_sim_engine:fail({dropped, Nd, D}, Acc);
              (_, Acc) -> Acc
           end, S, Effs),
    {Out, S2} = lose_replicate([{hm_dotted:address(To), M} || {send, To, M} <- Effs], S1),
    hm_sim_engine:send_all(Nd, Out, S2).

%% option `drop_replicate': the share of replicate-on-write messages lost (the paper's
%% replication message loss: 10 %, or 100 % to leave everything to anti-entropy)
lose_replicate(Out, S = #{cfg := #{drop_replicate := P}, faults := true}) ->
    lists:foldl(fun(O = {_, M}, {Acc, Sx}) when element(1, M) =:= replicate ->
                        case hm_sim_engine:coin(P, Sx) of
                            {true, Sy} -> {Acc, hm_sim_engine:bump(dropped_replicate, Sy)};
                            {false, Sy} -> {Acc ++ [O], Sy}
                        end;
                   (O, {Acc, Sx}) -> {Acc ++ [O], Sx}
                end, {[], S}, Out);
lose_replicate(Out, S) -> {Out, S}.

stored(Nd, Key, Info = #{entries := E}, S = #{max_entries := Max, now := Now, cfg := Cfg}) ->
    S1 = S#{max_entries := max(Max, E)},
    S2 = case Info of
             #{removed := true} -> hm_sim_engine:bump(removed, S1);
             _ -> S1
         end,
    case maps:get(measure, Cfg, false) of
        true -> S2#{samples := [{Now, Nd, Key, Info} | maps:get(samples, S2)]};
        false -> S2
    end.

%% @doc The driver's events: timers, deliveries, trace actions.
-spec event(term(), map()) -> map().
event({timer, Nd, I, M}, S = #{inc := Inc}) ->
    case hm_sim_engine:up(Nd, S) andalso maps:get(Nd, Inc) =:= I of
        false -> S;                                     % a timer of a copy that crashed
        true -> step(Nd, fun(R) -> hm_dotted:timeout(M, R) end, S)
    end;
event({deliver, From, To, Msg, Epoch}, S) ->
    case hm_sim_engine:deliverable(From, To, Epoch, S) of
        false -> hm_sim_engine:bump(dropped_cut, S);
        true ->
            step(To, fun(R) -> hm_dotted:handle(Msg, R) end, S)
    end;
event({action, A}, S) ->
    action(A, hm_sim_engine:bump(actions, S)).

step(Nd, F, S) ->
    R0 = rep(Nd, S),
    {R1, Effs} = F(R0),
    effects(Nd, Effs, put_rep(Nd, R1, note_ready(R0, R1, S))).

%% stat `ready_ms': when a copy last became ready (a handoff taken)
note_ready(R0, R1, S = #{now := Now, stats := St}) ->
    case {hm_dotted:status(R0), hm_dotted:status(R1)} of
        {syncing, ready} -> S#{stats := St#{ready_ms => max(Now, maps:get(ready_ms, St, 0))}};
        _ -> S
    end.

%% @doc A heal or a restart: anti-entropy repairs what was missed, nothing to do at once.
-spec nodeup(node(), node(), map()) -> map().
nodeup(_At, _Peer, S) -> S.

%% @doc A trace action: a client put or delete, a partition, a heal, a crash, a restart, a
%% copy replaced.
-spec action(term(), map()) -> map().
action({op_i, I, Key, Op}, S = #{nodes := Nodes}) ->
    %% the I-th copy of the group as it is now (the benchmark's workloads, under churn)
    action({op, lists:nth(1 + (I - 1) rem length(Nodes), Nodes), Key, Op}, S);
action({op, Nd, Key, Op}, S = #{now := Now, ops := Ops, cfg := Cfg}) ->
    case hm_sim_engine:up(Nd, S) andalso lists:member(Nd, maps:get(nodes, S)) andalso
        hm_dotted:status(rep(Nd, S)) of
        false -> hm_sim_engine:bump(ops_skipped, S);
        syncing -> hm_sim_engine:bump(ops_refused, S);         % as the runtime's server refuses
        ready ->
            R = rep(Nd, S),
            {_, Ctx} = hm_dotted:get(Key, R),
            {Dot, _} = hm_node_clock:next_dot(hm_dotted:id(R), hm_dotted:node_clock(R)),
            What = case Op of put -> {put, map_size(Ops) + 1}; delete -> delete end,
            {R1, Effs} = case What of
                             {put, V} -> hm_dotted:put(Key, V, Ctx, R);
                             delete -> hm_dotted:delete(Key, Ctx, R)
                         end,
            {ok, C} = hm_node_clock:decode(Ctx),
            Info = #{key => Key, what => What, ctx => hm_node_clock:add(Dot, C), lost => false,
                     at => Now, node => Nd},
            S1 = S#{ops := Ops#{Dot => Info}},
            S2 = case maps:get(measure, Cfg, false) of
                     true -> S1#{samples := [{write, Now, Nd, Key, Dot, Op} | maps:get(samples, S1)]};
                     false -> S1
                 end,
            effects(Nd, Effs, put_rep(Nd, R1, hm_sim_engine:bump(ops, S2)))
    end;
action({partition, Shape, Groups}, S) ->
    hm_sim_engine:bump({partition, Shape}, hm_sim_engine:reconnect(S#{groups := Groups}, S));
action(heal, S) ->
    hm_sim_engine:reconnect(S#{groups := all}, S);
action({crash, Nd}, S = #{inc := Inc, cfg := Cfg}) ->
    case hm_sim_engine:up(Nd, S) of
        false -> S;
        true ->
            %% a crash keeps the copy's saved state (`restart => saved': DottedDB's stable
            %% storage) or nothing (`empty': the runtime's copies live in their process);
            %% its links break, its timers stop
            S1 = lists:foldl(fun(M, Acc) -> hm_sim_engine:new_epoch(Nd, M, Acc) end, S,
                             maps:get(nodes, S) -- [Nd]),
            S2 = S1#{inc := Inc#{Nd => maps:get(Nd, Inc) + 1}},
            S3 = case maps:get(restart, Cfg, saved) of
                     saved -> put_rep(Nd, {down, rep(Nd, S), true}, S2);
                     empty -> mark_lost(maps:get(nodes, S) -- [Nd],
                                        put_rep(Nd, {down, none, false}, S2))
                 end,
            hm_sim_engine:bump(crashes, S3)
    end;
action({restart, Nd}, S = #{nodes := Nodes}) ->
    case maps:get(Nd, maps:get(reps, S), out) of
        {down, none, false} ->
            %% as the runtime's server starts a copy: it takes a peer's state first when a
            %% copy it reaches is ready, else it starts empty
            Ready = [M || M <- Nodes -- [Nd], hm_sim_engine:up(M, S),
                          hm_sim_engine:connected(Nd, M, S),
                          hm_dotted:status(rep(M, S)) =:= ready],
            hm_sim_engine:bump(restarts, start_copy(Nd, Nodes, Ready =/= [], S));
        {down, R, _} ->
            hm_sim_engine:bump(restarts, step(Nd, fun hm_dotted:recover/1, put_rep(Nd, R, S)));
        _ -> S
    end;
action({replace, I}, S = #{nodes := Nodes}) ->
    Old = lists:nth(1 + (I - 1) rem length(Nodes), Nodes),
    %% one node at a time, as operators replace them: the group's other copies are ready
    %% (no handoff under way)
    case lists:all(fun(Nd) -> case rep(Nd, S) of
                                  {down, none, _} -> false;
                                  {down, R, _} -> hm_dotted:status(R) =:= ready;
                                  R -> hm_dotted:status(R) =:= ready
                              end
                   end, Nodes -- [Old]) of
        true -> replace(Old, S);
        false -> hm_sim_engine:bump(replace_skipped, S)
    end.

replace(Old, S0 = #{nodes := Nodes, next_id := Next}) ->
    New = list_to_atom("n" ++ integer_to_list(Next)),
    Peers = (Nodes -- [Old]) ++ [New],
    %% what only the old copy held is lost with it (a node failed for good)
    S = #{ops := Ops1} = mark_lost(Nodes -- [Old], S0),
    S1 = lists:foldl(fun(M, Acc) -> hm_sim_engine:new_epoch(Old, M, Acc) end, S, Nodes -- [Old]),
    S2 = lists:foldl(fun(Nd, Acc) ->
                             case rep(Nd, Acc) of
                                 {down, none, _} -> Acc;     % it starts with the new group
                                 {down, R, St} ->
                                     {R1, _} = hm_dotted:set_peers(Peers, R),
                                     put_rep(Nd, {down, R1, St}, Acc);
                                 R ->
                                     step(Nd, fun(_) -> hm_dotted:set_peers(Peers, R) end, Acc)
                             end
                     end, put_rep(Old, out, S1#{nodes := Peers, next_id := Next + 1, ops := Ops1}),
                     Nodes -- [Old]),
    hm_sim_engine:bump(replaced, start_copy(New, Peers, true, S2)).

%% Every acknowledged write no copy of `Holders' has (up, or down with its state) is lost.
mark_lost(Holders, S = #{reps := Reps, ops := Ops}) ->
    NCs = [hm_dotted:node_clock(R) || Nd <- Holders,
                                      R <- [case maps:get(Nd, Reps) of
                                                {down, X, _} -> X;
                                                X -> X
                                            end], R =/= none],
    S#{ops := maps:map(fun(Dot, O = #{lost := false}) ->
                               O#{lost := not lists:any(fun(NC) ->
                                                                hm_node_clock:contains(Dot, NC)
                                                        end, NCs)};
                          (_, O) -> O
                       end, Ops)}.

%%% ================================================================ quiescence and checks

copies(#{nodes := Nodes, reps := Reps}) -> [{Nd, maps:get(Nd, Reps)} || Nd <- Nodes].

%% @doc Every copy is up, ready, and shows the same values.
-spec converged(map()) -> boolean().
converged(S) ->
    Cs = copies(S),
    lists:all(fun({Nd, _}) -> hm_sim_engine:up(Nd, S) end, Cs) andalso
        lists:all(fun({_, R}) -> hm_dotted:status(R) =:= ready end, Cs) andalso
        hm_check:converged([hm_dotted:values(R) || {_, R} <- Cs]).

%% @doc Converged, every context stripped, no dot-key entry left (node-clock mode).
-spec quiescent(map()) -> boolean().
quiescent(S) ->
    converged(S) andalso lists:all(fun({_, R}) -> leftovers(R) =:= [] end, copies(S)).

leftovers(R) ->
    M = hm_dotted:metadata(R),
    [non_stripped || maps:get(non_stripped, M) > 0]
        ++ [dot_keys || maps:get(dot_keys, M) > 0, hm_dotted:anti_entropy(R) =:= node_clock]
        ++ [retired || maps:get(retired, M) > 0].

finish(S = #{ops := Ops, stats := St, failures := Fs0, now := Now}) ->
    Cs = copies(S),
    Fs = Fs0 ++ [{Now, F} || F <- check(S)],
    Lost = length([x || #{lost := true} <- maps:values(Ops)]),
    Meta = [hm_dotted:metadata(R) || {_, R} <- Cs, is_tuple(R), element(1, R) =/= down],
    #{ok => Fs =:= [], failures => Fs,
      stats => St#{quiesced_ms => maps:get(quiesced_ms, S, 0),
                   lost_with_replaced_copy => Lost,
                   max_entries => maps:get(max_entries, S),
                   node_clock_entries => lists:max([0 | [maps:get(node_clock, M) || M <- Meta]]),
                   samples => lists:reverse(maps:get(samples, S))}}.

check(S = #{ops := Ops}) ->
    Cs = copies(S),
    %% 1. convergence
    C1 = case converged(S) of
             true -> [];
             false -> [{diverged, [{Nd, hm_check:outcome(fun() -> hm_dotted:status(R) end),
                                    hm_check:outcome(fun() -> hm_dotted:values(R) end)}
                                   || {Nd, R} <- Cs]}]
         end,
    %% 2. no lost acknowledged write: a key shows the values of the puts no surviving write
    %% supersedes; a lost write's context may have reached other copies before its copy
    %% went (its effect, not its dot: a repair's filled context), so what it supersedes
    %% may be gone too, but nothing else
    Kept = [{D, O} || {D, O = #{lost := false}} <- maps:to_list(Ops)],
    LiveOf = fun(By) ->
                     [{D, O} || {D, O = #{key := K}} <- Kept,
                                not lists:any(fun({D2, #{key := K2, ctx := C}}) ->
                                                      D2 =/= D andalso K2 =:= K andalso
                                                          hm_node_clock:contains(D, C)
                                              end, By)]
             end,
    Values = fun(Live) -> lists:foldl(fun({_, #{key := K, what := {put, V}}}, Acc) ->
                                              Acc#{K => maps:get(K, Acc, []) ++ [V]};
                                         (_, Acc) -> Acc
                                      end, #{}, lists:keysort(1, Live))
             end,
    Expected = Values(LiveOf(Kept)),
    AtLeast = Values(LiveOf(maps:to_list(Ops))),
    C2 = [{acknowledged_write_lost_or_superseded_write_shown, Nd, {shows, Vs},
           {expected, Expected}}
          || {Nd, R} <- Cs, Vs <- [hm_check:outcome(fun() -> hm_dotted:values(R) end)], Vs =/= Expected,
             not (is_map(Vs) andalso within(AtLeast, Vs, Expected))],
    %% 3. bounded clocks: no context left, one id per live version at most
    C3 = [{clock_not_bounded, Nd, Key, hm_dotted:clock_entries(Key, R)}
          || {Nd, R} <- Cs, is_tuple(R), element(1, R) =/= down,
             {Key, {Vers, CC}} <- maps:to_list(hm_dotted:objects(R)),
             not hm_node_clock:is_empty(CC) orelse
                 hm_dotted:clock_entries(Key, R) > map_size(Vers)],
    %% 4. no tombstone: stored keys are keys with a value; nothing left to strip or look up
    C4 = [{tombstone_left, Nd, Key}
          || {Nd, R} <- Cs, is_tuple(R), element(1, R) =/= down,
             Key <- maps:keys(hm_dotted:objects(R)),
             not maps:is_key(Key, hm_dotted:values(R))]
        ++ [{metadata_left, Nd, L} || {Nd, R} <- Cs, is_tuple(R), element(1, R) =/= down,
                                      L <- [leftovers(R)], L =/= []],
    C1 ++ C2 ++ C3 ++ C4.

%% every key shows at least the values of `Min' and at most those of `Max'
within(Min, Shown, Max) ->
    Keys = lists:usort(maps:keys(Min) ++ maps:keys(Shown) ++ maps:keys(Max)),
    lists:all(fun(K) ->
                      [Lo, V, Hi] = [maps:get(K, M, []) || M <- [Min, Shown, Max]],
                      Lo -- V =:= [] andalso V -- Hi =:= []
              end, Keys).

%%% ================================================================ seeds

%% @doc Run dotted seeds `From' .. `From + Count - 1'; `{Passed, Failed, Totals, Failed}' as
%% {@link hm_sim:check_seeds/2}.
-spec check_seeds({integer(), pos_integer()}, map()) ->
          {non_neg_integer(), non_neg_integer(), map(), [{integer(), hm_sim:result()}]}.
check_seeds({From, Count}, Opts) ->
    lists:foldl(fun(Seed, {P, F, Tot, Bad}) ->
                        Res = #{ok := Ok, stats := St} = run_seed(Seed, Opts),
                        Tot1 = hm_sim_engine:totals(maps:without([samples, max_entries,
                                                           node_clock_entries], St), Tot),
                        Tot2 = Tot1#{max_entries => max(maps:get(max_entries, St, 0),
                                                        maps:get(max_entries, Tot1, 0))},
                        case Ok of
                            true -> {P + 1, F, Tot2, Bad};
                            false -> {P, F + 1, Tot2, Bad ++ [{Seed, Res}]}
                        end
                end, {0, 0, #{}, []}, lists:seq(From, From + Count - 1)).

%% @doc The summary lines of a campaign (what `make sim' prints).
-spec summary_line(non_neg_integer(), non_neg_integer(), map()) -> iolist().
summary_line(P, F, Tot) ->
    io_lib:format("~p DottedDB group schedules (~p client ops, ~p messages, ~p copies replaced, "
                  "~p writes lost with a replaced copy, ~p keys removed without tombstone, "
                  "largest clock at a store: ~p ids); faults injected: ~s~n"
                  "sim dotted: ~p passed, ~p failed~n",
                  [P + F, maps:get(ops, Tot, 0), maps:get(msgs, Tot, 0),
                   maps:get(replaced, Tot, 0), maps:get(lost_with_replaced_copy, Tot, 0),
                   maps:get(removed, Tot, 0), maps:get(max_entries, Tot, 0),
                   hm_sim_engine:fault_line(Tot), P, F]).

%% @doc Print a failed dotted seed: its failures and a minimised trace written to
%% `_build/sim/dotted-trace-S.eterm'.
-spec print_failure(integer(), hm_sim:result()) -> ok.
print_failure(Seed, #{failures := Fs}) ->
    {Cfg, Trace} = gen(Seed, #{}),
    Desc = io_lib:format("~p, ~p copies", [maps:get(ae, Cfg), maps:get(n, Cfg)]),
    hm_sim_engine:print_minimised("dotted seed", Seed, Desc, fun(T) -> run(Cfg, T) end, Trace,
                                  Fs,
                                  "_build/sim/dotted-trace-" ++ integer_to_list(Seed) ++ ".eterm",
                                  fun(Min) -> {dotted, Cfg, Min} end).

%% @doc Run one configuration and trace, print it and its result; true when it passed.
-spec replay(integer(), cfg(), [hm_sim:action()]) -> boolean().
replay(Seed, Cfg, Trace) ->
    Res = #{ok := Ok} = run(Cfg, Trace),
    io:format("dotted seed ~p: ~p~ntrace (~p actions): ~p~n", [Seed, Cfg, length(Trace), Trace]),
    case Ok of
        true -> io:format("stats: ~p~nsim dotted: 1 passed, 0 failed~n",
                          [maps:without([samples], maps:get(stats, Res))]);
        false -> print_failure(Seed, Res), io:format("sim dotted: 0 passed, 1 failed~n")
    end,
    Ok.
