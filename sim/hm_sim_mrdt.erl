%% @doc Deterministic simulator of sessions over mergeable types (after "Banyan:
%% Coordination-free Distributed Transactions over Mergeable Types", sections 3 and 4): 3–5
%% nodes in ONE Erlang process, each with its own copy of the repository's table (a map), its
%% {@link hm_mrdt_node} state and its sessions ({@link hm_mrdt_session}): the runtime's pure
%% cores, driven by a seeded scheduler (`rand:*_s', no clock).
%%
%% == Model ==
%% A node's writes (blocks, branch records, grafts, deletions of collected history) apply to
%% its copy at once and reach each other node later, one key at a time, in causal order, as
%% the EC table's broadcast delivers them; a write is not delivered across a cut link or from or to a node
%% that is down. A crash loses the node's sessions (their unpublished writes) and its node
%% state; the copy survives (disc copies) and the restarted node reads its public branch
%% back from its branch record. Partitions cut random pairs of nodes; heals restore them.
%%
%% == Workload ==
%% Sessions connect, increment two counters `x' and `y' by the same amount in one session
%% (two writes, one publish), add fresh elements to a set, append fresh entries to a linked
%% log `l', publish (alone, or every session
%% of a node at once: the group commit), refresh, close; nodes run
%% remote refresh and history collection on ticks, and compact their public branch
%% ({@link hm_mrdt_node:compact/2}) at any time, several at once. At the end every cut heals, every node
%% restarts, and the nodes exchange and refresh until quiet.
%%
%% == Checkers ==
%% <ol>
%% <li>atomic visibility: a session with nothing pending always reads `x =:= y';</li>
%% <li>collection never removes what a live session needs: after every step each live
%% session can read every key of its snapshot (no block missing on its node), and every
%% node that is up can read its public branch, which never counts more than was
%% published;</li>
%% <li>convergence: at the end every node's public branch shows the same values;</li>
%% <li>no lost publish: `x' equals the sum of every published increment, and the set holds
%% exactly the published elements;</li>
%% <li>no lost append and bounded storage: every node's linked log `l' reads exactly the
%% published entries, and once settled each node's copy holds no log value (`{obj, Hash}')
%% its public branch's log does not reach and no commit but its head, the commits whose
%% packs hold blocks its head's tree shares, and merged LCAs in the merge cache, so what is
%% stored is what is live, not every version.</li>
%% </ol>
-module(hm_sim_mrdt).

-export([main/1, run/1, check_seeds/1, final_state/1, check_end/1, reached/4]).

%% @doc `["seeds", N]': run seeds 1..N, print failures and the summary line
%% `sim sessions: P passed, F failed (...)'; `["seed", S]': run one seed and print its result.
-spec main([string()]) -> ok | failed.
main(["seeds", N]) ->
    {P, F, Stats, Bad} = check_seeds({1, list_to_integer(N)}),
    [io:format("sim sessions: seed ~p failed: ~p~n", [S, R]) || {S, R} <- Bad],
    io:format("sim sessions: ~p passed, ~p failed (~p publishes, ~p merges, ~p deletions, "
              "~p crashes, ~p partitions)~n",
              [P, F, maps:get(publishes, Stats), maps:get(merges, Stats),
               maps:get(deleted, Stats), maps:get(crashes, Stats), maps:get(cuts, Stats)]),
    case F of
        0 -> ok;
        _ -> failed
    end;
main(["seed", S]) ->
    case run(list_to_integer(S)) of
        {ok, _} = R -> io:format("~p~n", [R]), ok;
        R -> io:format("~p~n", [R]), failed
    end.

%% @doc Run seeds `From..From+N-1': {passed, failed, summed statistics, failures}.
-spec check_seeds({pos_integer(), pos_integer()}) ->
          {non_neg_integer(), non_neg_integer(), map(), [{integer(), term()}]}.
check_seeds({From, N}) ->
    Zero = #{publishes => 0, merges => 0, deleted => 0, crashes => 0, cuts => 0, compactions => 0},
    lists:foldl(fun(Seed, {P, F, St, Bad}) ->
                        case run(Seed) of
                            {ok, S} -> {P + 1, F, maps:map(fun(K, V) -> V + maps:get(K, S) end, St), Bad};
                            {error, R} -> {P, F + 1, St, [{Seed, R} | Bad]}
                        end
                end, {0, 0, Zero, []}, lists:seq(From, From + N - 1)).

%% @doc Run one seed: `{ok, Statistics}' or `{error, {Checker, Details}}'.
-spec run(integer()) -> {ok, map()} | {error, term()}.
run(Seed) ->
    try
        S = final_state(Seed),
        check_end(S),
        {ok, maps:get(stats, S)}
    catch throw:{check, What} -> {error, What};
          throw:{missing, Key} -> {error, {missing_at_end, Key}}
    end.

%% @doc The state at the end of seed `Seed''s schedule (settled), checked along the way by
%% checkers 1 and 2 (a failure throws `{check, What}'); {@link check_end/1} checks the rest.
-spec final_state(integer()) -> map().
final_state(Seed) ->
    R0 = rand:seed_s(exsss, Seed),
    {K, R1} = rand:uniform_s(3, R0),
    Nodes = [list_to_atom("n" ++ integer_to_list(I)) || I <- lists:seq(1, K + 2)],
    {Steps, R2} = rand:uniform_s(300, R1),
    S0 = #{rand => R2, nodes => Nodes, up => maps:from_list([{N, true} || N <- Nodes]),
           copy => maps:from_list([{N, #{}} || N <- Nodes]),
           nodest => maps:from_list([{N, hm_mrdt_node:new(N, none)} || N <- Nodes]),
           written => #{}, delivered => maps:from_list([{N, #{}} || N <- Nodes]),
           log => #{}, cuts => [], sessions => #{}, next => 1,
           published => 0, elems => [], entries => [],
           stats => #{publishes => 0, merges => 0, deleted => 0, crashes => 0, cuts => 0, compactions => 0}},
    S1 = lists:foldl(fun(_, S) -> check_sessions(step(S)) end, S0, lists:seq(1, 100 + Steps)),
    settle(S1#{cuts := []}).

%%% ------------------------------------------------------------------ store model

fetch(Map) -> fun(K) -> case Map of #{K := V} -> {ok, V}; _ -> not_found end end.

store(S = #{nodes := Nodes}, N) ->
    Fetch = fetch(copy(S, N)),
    hm_mrdt_history:set_max_graft(hm_mrdt_history:store(Fetch), hm_mrdt_node:max_graft(Fetch, Nodes)).

copy(#{copy := C}, N) -> maps:get(N, C).

%% Node N writes Puts then deletes Dels: applied to its copy now, broadcast for the others.
write(S, _, [], []) -> S;
write(S, N, Puts, Dels) ->
    %% one broadcast operation per key, as the EC table sends them
    lists:foldl(fun({put, KV}, Acc) -> write_op(Acc, N, [KV], []);
                   ({del, K}, Acc) -> write_op(Acc, N, [], [K])
                end, S, [{put, KV} || KV <- Puts] ++ [{del, K} || K <- Dels]).

write_op(S = #{copy := C, log := Log, delivered := D}, N, Puts, Dels) ->
    Mine = maps:get(N, Log, []),
    Seq = length(Mine) + 1,
    Deps = maps:get(N, D),
    Op = {Seq, Deps, Puts, Dels},
    S#{copy := C#{N := apply_op(maps:get(N, C), Puts, Dels)},
       log := Log#{N => Mine ++ [Op]},
       delivered := D#{N := Deps#{N => Seq}}}.

apply_op(Map, Puts, Dels) -> maps:without(Dels, maps:merge(Map, maps:from_list(Puts))).

%% The ops M can receive now: from each origin, the next one, if its dependencies are in.
deliverable(S = #{log := Log, delivered := D, up := Up}, M) ->
    DM = maps:get(M, D),
    [{O, Op} || maps:get(M, Up), {O, Ops} <- lists:sort(maps:to_list(Log)), O =/= M,
                maps:get(O, Up), not cut(S, M, O),
                Op <- [lists:nth(maps:get(O, DM, 0) + 1, Ops) || length(Ops) > maps:get(O, DM, 0)],
                deps_in(element(2, Op), DM)].

deps_in(Deps, DM) -> lists:all(fun({O, Sq}) -> maps:get(O, DM, 0) >= Sq end, maps:to_list(Deps)).

deliver(S = #{copy := C, delivered := D}, M, O, {Seq, _, Puts, Dels}) ->
    S#{copy := C#{M := apply_op(maps:get(M, C), Puts, Dels)},
       delivered := D#{M := (maps:get(M, D))#{O => Seq}}}.

cut(#{cuts := Cuts}, A, B) -> lists:member({A, B}, Cuts) orelse lists:member({B, A}, Cuts).

%%% ------------------------------------------------------------------ node steps

%% Write the store's new blocks and N's branch record if it changed.
save(S = #{nodest := NS, written := W}, N, St) ->
    Puts = hm_mrdt_history:writes(St),
    S1 = write(S, N, Puts, []),
    Record = hm_mrdt_node:record(maps:get(N, NS), store(S1, N)),
    case maps:get(N, W, none) of
        Record -> S1;
        _ -> (write(S1, N, [{{branch, N}, Record}], []))#{written := W#{N => Record}}
    end.

records(S, N) ->
    maps:from_list([{Nd, R} || {{branch, Nd}, R} <- maps:to_list(copy(S, N))]).

remote_refresh(S = #{nodest := NS}, N) ->
    Before = hm_mrdt_node:head(maps:get(N, NS)),
    {NSt, St, _} = hm_mrdt_node:remote_refresh(maps:get(N, NS), store(S, N), records(S, N)),
    S1 = save(S#{nodest := NS#{N := NSt}}, N, St),
    case hm_mrdt_node:head(NSt) of
        Before -> S1;
        _ -> bump(S1, merges, 1)
    end.

gc(S = #{nodest := NS, nodes := Nodes}, N) ->
    St = store(S, N),
    Records = (records(S, N))#{N => hm_mrdt_node:record(maps:get(N, NS), St)},
    Cache = [{Ls, V} || {{cache, Ls}, V} <- maps:to_list(copy(S, N))],
    case hm_mrdt_node:gc(maps:get(N, NS), St, Nodes, Records, Cache) of
        not_ready -> S;
        #{graft := G, delete := Dl} -> bump(write(S, N, G, Dl), deleted, length(Dl))
    end.

%% Any node may compact at any time (the runtime lets one node compact when idle): merges
%% of concurrent compactions and of compactions with publishes are exercised too.
compact(S = #{nodest := NS}, N) ->
    case hm_mrdt_node:compact(maps:get(N, NS), store(S, N)) of
        {ok, NSt, St} -> bump(save(S#{nodest := NS#{N := NSt}}, N, St), compactions, 1);
        none -> S
    end.

bump(S = #{stats := St}, K, D) -> S#{stats := St#{K := maps:get(K, St) + D}}.

%%% ------------------------------------------------------------------ sessions

connect(S0 = #{nodest := NS, sessions := Ss, next := Id}, N) ->
    S = remote_refresh(S0, N),
    Head = hm_mrdt_node:head(maps:get(N, maps:get(nodest, S))),
    NSt = hm_mrdt_node:open(maps:get(N, maps:get(nodest, S)), Id, Head),
    _ = NS,
    save(S#{nodest := (maps:get(nodest, S))#{N := NSt},
            sessions := Ss#{Id => #{node => N, sess => hm_mrdt_session:new(Id, Head),
                                    incr => 0, elems => [], logged => []}},
            next := Id + 1}, N, hm_mrdt_history:store(fun(_) -> not_found end)).

read(S, #{node := N, sess := Sess}, K, Default) ->
    case hm_mrdt_session:read(Sess, store(S, N), K) of
        {ok, V} -> V;
        not_found -> Default
    end.

session_write(S = #{sessions := Ss}, Id, K, T, V) ->
    Ses = #{node := N, sess := Sess} = maps:get(Id, Ss),
    {ok, Sess1} = hm_mrdt_session:write(Sess, store(S, N), K, T, V),
    S#{sessions := Ss#{Id := Ses#{sess := Sess1}}}.

incr(S = #{sessions := Ss}, Id, D) ->
    Ses = maps:get(Id, Ss),
    S1 = session_write(S, Id, x, hm_mrdt_counter, read(S, Ses, x, 0) + D),
    S2 = session_write(S1, Id, y, hm_mrdt_counter, read(S1, Ses, y, 0) + D),
    #{sessions := Ss2} = S2,
    S2#{sessions := Ss2#{Id := (maps:get(Id, Ss2))#{incr := maps:get(incr, Ses) + D}}}.

add(S = #{sessions := Ss, next := E}, Id) ->
    Ses = maps:get(Id, Ss),
    S1 = session_write(S, Id, s, hm_mrdt_set, [E | read(S, Ses, s, [])]),
    #{sessions := Ss1} = S1,
    S1#{sessions := Ss1#{Id := (maps:get(Id, Ss1))#{elems := [E | maps:get(elems, Ses)]}},
        next := E + 1}.

%% Append a fresh entry to the linked log `l'.
append(S = #{sessions := Ss, next := E}, Id) ->
    Ses = maps:get(Id, Ss),
    S1 = session_write(S, Id, l, hm_mrdt_linked_log, E),
    #{sessions := Ss1} = S1,
    S1#{sessions := Ss1#{Id := (maps:get(Id, Ss1))#{logged := [E | maps:get(logged, Ses)]}},
        next := E + 1}.

publish(S0 = #{sessions := Ss}, Id) ->
    Ses = #{node := N, sess := Sess} = maps:get(Id, Ss),
    case hm_mrdt_session:pending(Sess) of
        P when map_size(P) =:= 0 -> S0;
        P ->
            S00 = write(S0, N, hm_mrdt_session:objects(Sess), []),
            #{nodest := NS} = S00,
            case hm_mrdt_node:publish(maps:get(N, NS), store(S00, N), Id, P) of
                {ok, NSt, St} ->
                    Head = hm_mrdt_node:head(NSt),
                    S1 = save(S00#{nodest := NS#{N := NSt}}, N, St),
                    #{published := Pub, elems := Es, entries := Ls} = S1,
                    bump(S1#{sessions := Ss#{Id := Ses#{sess := hm_mrdt_session:published(Sess, Head),
                                                        incr := 0, elems := [], logged := []}},
                             published := Pub + maps:get(incr, Ses),
                             elems := maps:get(elems, Ses) ++ Es,
                             entries := maps:get(logged, Ses) ++ Ls}, publishes, 1);
                {conflict, R} -> throw({check, {publish_conflict, R}})
            end
    end.

%% Every session of node N publishes at once (the server's group commit).
publish_group(S00 = #{sessions := Ss0}, N) ->
    Mine = [{Id, Sess} || {Id, #{node := M, sess := Sess}} <- lists:sort(maps:to_list(Ss0)), M =:= N],
    S0 = #{nodest := NS} = write(S00, N, lists:append([hm_mrdt_session:objects(Sess) || {_, Sess} <- Mine]), []),
    Batch = [{Id, P} || {Id, Sess} <- Mine, P <- [hm_mrdt_session:pending(Sess)], map_size(P) > 0],
    {NSt, St, Results} = hm_mrdt_node:publish_many(maps:get(N, NS), store(S0, N), Batch),
    Head = hm_mrdt_node:head(NSt),
    S1 = save(S0#{nodest := NS#{N := NSt}}, N, St),
    lists:foldl(fun({Id, ok}, Acc = #{sessions := Ss, published := P, elems := Es,
                                      entries := Ls}) ->
                        Ses = #{sess := Sess} = maps:get(Id, Ss),
                        bump(Acc#{sessions := Ss#{Id := Ses#{sess := hm_mrdt_session:published(Sess, Head),
                                                             incr := 0, elems := [], logged := []}},
                                  published := P + maps:get(incr, Ses),
                                  elems := maps:get(elems, Ses) ++ Es,
                                  entries := maps:get(logged, Ses) ++ Ls}, publishes, 1);
                   ({_, {conflict, R}}, _) -> throw({check, {publish_conflict, R}})
                end, S1, Results).

refresh(S0, Id) ->
    #{node := N} = maps:get(Id, maps:get(sessions, S0)),
    S = remote_refresh(S0, N),
    #{sessions := Ss, nodest := NS} = S,
    Ses = #{sess := Sess} = maps:get(Id, Ss),
    Head = hm_mrdt_node:head(maps:get(N, NS)),
    case hm_mrdt_session:rebase(Sess, store(S, N), Head) of
        {ok, Sess1} ->
            save(S#{sessions := Ss#{Id := Ses#{sess := Sess1}},
                    nodest := NS#{N := hm_mrdt_node:open(maps:get(N, NS), Id, Head)}},
                 N, hm_mrdt_history:store(fun(_) -> not_found end));
        {conflict, R} -> throw({check, {refresh_conflict, R}})
    end.

close(S0, Id) ->
    S = #{sessions := Ss, nodest := NS} = publish(S0, Id),
    #{node := N} = maps:get(Id, Ss),
    save(S#{sessions := maps:remove(Id, Ss), nodest := NS#{N := hm_mrdt_node:close(maps:get(N, NS), Id)}},
         N, hm_mrdt_history:store(fun(_) -> not_found end)).

%%% ------------------------------------------------------------------ scheduler

pick(List, S = #{rand := R}) ->
    {I, R1} = rand:uniform_s(length(List), R),
    {lists:nth(I, List), S#{rand := R1}}.

up_nodes(#{nodes := Ns, up := Up}) -> [N || N <- Ns, maps:get(N, Up)].

step(S0) ->
    {Action, S} = pick([connect, incr, incr, add, append, publish, publish, group, refresh, close, read,
                        deliver, deliver, deliver, deliver, deliver, tick, tick, fault, compact], S0),
    Live = lists:sort(maps:keys(maps:get(sessions, S))),
    case {Action, Live} of
        {connect, _} -> {N, S1} = pick(up_nodes(S), S), connect(S1, N);
        {group, _} -> {N, S1} = pick(up_nodes(S), S), publish_group(S1, N);
        {deliver, _} -> deliver_one(S);
        {tick, _} -> {N, S1} = pick(up_nodes(S), S), gc(remote_refresh(S1, N), N);
        {compact, _} -> {N, S1} = pick(up_nodes(S), S), compact(S1, N);
        {fault, _} -> fault(S);
        {_, []} -> S;
        {incr, _} -> {Id, S1 = #{rand := R}} = pick(Live, S),
                     {D, R1} = rand:uniform_s(5, R),
                     incr(S1#{rand := R1}, Id, D);
        {add, _} -> {Id, S1} = pick(Live, S), add(S1, Id);
        {append, _} -> {Id, S1} = pick(Live, S), append(S1, Id);
        {publish, _} -> {Id, S1} = pick(Live, S), publish(S1, Id);
        {refresh, _} -> {Id, S1} = pick(Live, S), refresh(S1, Id);
        {close, _} -> {Id, S1} = pick(Live, S), close(S1, Id);
        {read, _} -> S
    end.

deliver_one(S) ->
    case [{M, O, Op} || M <- up_nodes(S), {O, Op} <- deliverable(S, M)] of
        [] -> S;
        Ds -> {{M, O, Op}, S1} = pick(Ds, S), deliver(S1, M, O, Op)
    end.

fault(S0 = #{nodes := Nodes}) ->
    {F, S} = pick([cut, cut, heal, crash, restart], S0),
    case F of
        cut -> {A, S1} = pick(Nodes, S), {B, S2} = pick(Nodes -- [A], S1),
               bump(S2#{cuts := lists:usort([{A, B} | maps:get(cuts, S2)])}, cuts, 1);
        heal -> S#{cuts := []};
        crash ->
            case up_nodes(S) of
                [_, _ | _] = Up -> {N, S1} = pick(Up, S), bump(crash(S1, N), crashes, 1);
                _ -> S
            end;
        restart -> restart_all(S)
    end.

crash(S = #{up := Up, sessions := Ss}, N) ->
    S#{up := Up#{N := false}, sessions := maps:filter(fun(_, #{node := M}) -> M =/= N end, Ss)}.

restart_all(S = #{nodes := Nodes, up := Up}) ->
    lists:foldl(fun(N, Acc = #{nodest := NS, up := U}) ->
                        Head = case copy(Acc, N) of
                                   #{{branch, N} := {H, _, _}} -> H;
                                   _ -> none
                               end,
                        save(Acc#{up := U#{N := true}, nodest := NS#{N := hm_mrdt_node:new(N, Head)}},
                             N, hm_mrdt_history:store(fun(_) -> not_found end))
                end, S, [N || N <- Nodes, not maps:get(N, Up)]).

%% Heal, restart, close every session, then deliver and refresh until nothing changes.
settle(S0) ->
    S1 = restart_all(S0),
    S2 = lists:foldl(fun(Id, Acc) -> close(Acc, Id) end, S1, lists:sort(maps:keys(maps:get(sessions, S1)))),
    settle(S2, 50).

settle(S, 0) -> S;
settle(S0, K) ->
    S1 = deliver_all(S0),
    S2 = lists:foldl(fun(N, Acc) -> gc(remote_refresh(Acc, N), N) end, S1, maps:get(nodes, S1)),
    S3 = deliver_all(S2),
    case maps:get(log, S3) =:= maps:get(log, S0) of
        true -> S3;
        false -> settle(S3, K - 1)
    end.

deliver_all(S) ->
    case [{M, O, Op} || M <- up_nodes(S), {O, Op} <- deliverable(S, M)] of
        [] -> S;
        Ds -> deliver_all(lists:foldl(fun({M, O, Op}, Acc) ->
                                              %% one op per origin per pass keeps order
                                              deliver(Acc, M, O, Op)
                                      end, S, Ds))
    end.

%%% ------------------------------------------------------------------ checkers

check_sessions(S = #{sessions := Ss, published := P, nodes := Nodes}) ->
    %% no public branch counts more than was published
    [case value(S, N) of
         [X, _, _] when X > P -> throw({check, {over_count, N, X, P}});
         _ -> ok
     end || N <- Nodes, maps:get(N, maps:get(up, S))],
    maps:foreach(
      fun(Id, Ses = #{sess := Sess}) ->
              Clean = map_size(hm_mrdt_session:pending(Sess)) =:= 0,
              try {read(S, Ses, x, 0), read(S, Ses, y, 0), read(S, Ses, s, []),
                   read(S, Ses, l, [])} of
                  {_, _, _, {error, _} = E} -> throw({check, {gc_removed_live, Id, E}});
                  {X, Y, _, _} when Clean, X =/= Y ->
                      throw({check, {atomic_visibility, Id, X, Y}});
                  _ -> ok
              catch error:{badmatch, _} = E -> throw({check, {gc_removed_live, Id, E}});
                    throw:{missing, K} -> throw({check, {gc_removed_live, Id, K}})
              end
      end, Ss),
    S.

value(S, N) ->
    St = store(S, N),
    T = hm_mrdt_commits:tree_of(St, hm_mrdt_node:head(maps:get(N, maps:get(nodest, S)))),
    [case hm_mrdt_commits:read(St, T, K) of {ok, _, V} -> V; not_found -> D end
     || {K, D} <- [{x, 0}, {y, 0}, {s, []}]].

%% The linked log of N's public branch as a read shows it, and the objects it reaches.
log_of(S, N) ->
    St = store(S, N),
    Fetch = fun(H) -> hm_mrdt_history:get(St, {obj, H}) end,
    T = hm_mrdt_commits:tree_of(St, hm_mrdt_node:head(maps:get(N, maps:get(nodest, S)))),
    case hm_mrdt_commits:read(St, T, l) of
        {ok, Type, V} -> {hm_mrdt:read(Type, V, Fetch), reached(Type, [hm_mrdt:hash(V)], Fetch, #{})};
        not_found -> {[], #{}}
    end.

%% @doc The objects that the values of type `T' with hashes `Hashes' reach through their
%% references, fetched by `Fetch', added to `Acc' (`#{Hash => true}'; an object missing from
%% the store counts as reached, without references): the checkers' own walk, kept apart from
%% the one history collection runs (the Common Test suite's copy checks use it too).
-spec reached(module(), [hm_mrdt:hash()], hm_mrdt:fetch(), #{hm_mrdt:hash() => true}) ->
          #{hm_mrdt:hash() => true}.
reached(_, [], _, Acc) -> Acc;
reached(T, [H | Hs], Fetch, Acc) when is_map_key(H, Acc) -> reached(T, Hs, Fetch, Acc);
reached(T, [H | Hs], Fetch, Acc) ->
    Refs = case Fetch(H) of
               {ok, V} -> hm_mrdt:refs(T, V);
               not_found -> []
           end,
    reached(T, Refs ++ Hs, Fetch, Acc#{H => true}).

%% @doc Checkers 3 to 5 on a final state: `ok', or throws `{check, What}'.
-spec check_end(map()) -> ok.
check_end(S = #{nodes := Nodes, published := P, elems := Es, entries := Ls}) ->
    Values = [value(S, N) || N <- Nodes],
    case lists:usort(Values) of
        [[P, P, Set]] ->
            case Set =:= lists:sort(Es) of
                true -> ok;
                false -> throw({check, {lost_elements, Set, lists:sort(Es)}})
            end;
        [[X, Y, _]] -> throw({check, {lost_increments, X, Y, P}});
        Vs -> throw({check, {not_converged, Vs}})
    end,
    Expected = lists:reverse(lists:sort(Ls)),
    lists:foreach(
      fun(N) ->
              {Log, Reached} = log_of(S, N),
              Log =:= Expected orelse throw({check, {lost_entries, N, Log, Expected}}),
              %% storage stays bounded: once collected, a copy holds no log value its
              %% public branch's log does not reach, and no commit but its head
              Objs = [H || {obj, H} <- maps:keys(copy(S, N))],
              Extra = [H || H <- Objs, not is_map_key(H, Reached)],
              Extra =:= [] orelse throw({check, {objects_not_collected, N, length(Extra)}}),
              %% and no commit but its head, cached merges, and the commits whose packs
              %% hold blocks its head's tree still shares
              St = store(S, N),
              Head = hm_mrdt_node:head(maps:get(N, maps:get(nodest, S))),
              Commits = [C || {{block, C}, {commit, _, _, _, _}} <- maps:to_list(copy(S, N))]
                  -- [Head | hm_mrdt_commits:packs(St, Head)],
              length(Commits) =< cached(S, N)
                  orelse throw({check, {commits_not_collected, N, length(Commits)}})
      end, Nodes).

cached(S, N) -> length([K || {cache, _} = K <- maps:keys(copy(S, N))]).
